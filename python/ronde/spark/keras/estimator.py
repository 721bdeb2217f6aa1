"""KerasEstimator and KerasModel: Spark ML's Estimator/Model over a ronde job (Horovod's
horovod.spark.keras) for Keras 3 on its torch or tensorflow backend, whichever the driver's
Keras runs on. fit(df) writes the DataFrame as Parquet into the Store, trains on num_proc
ranks through ronde.spark.run with ronde.keras, saves the model in the store and returns a
KerasModel whose transform(df) adds the model's predictions."""

import json

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param.shared import Param, Params, TypeConverters

from ronde.spark import _data
from ronde.spark.keras import _train
from ronde.spark.store import Store

_WHO = "KerasEstimator"


class _KerasParams(Params):
    num_proc = Param(Params._dummy(), "num_proc", "number of ranks (Spark tasks)",
                     typeConverter=TypeConverters.toInt)
    model = Param(Params._dummy(), "model", "the keras.Model to train")
    optimizer = Param(Params._dummy(), "optimizer",
                      "a keras.optimizers.Optimizer (or its name); ranks get its configuration")
    loss = Param(Params._dummy(), "loss", "what keras.Model.compile takes as loss")
    loss_weights = Param(Params._dummy(), "loss_weights",
                         "keras.Model.compile's loss_weights (models with several outputs)")
    metrics = Param(Params._dummy(), "metrics", "keras.Model.compile's metrics")
    custom_objects = Param(Params._dummy(), "custom_objects",
                           "classes and functions Keras needs to load the model and optimizer")
    feature_cols = Param(Params._dummy(), "feature_cols",
                         "feature columns (numbers or arrays), concatenated in this order",
                         typeConverter=TypeConverters.toListString)
    label_cols = Param(Params._dummy(), "label_cols", "label columns",
                       typeConverter=TypeConverters.toListString)
    output_cols = Param(Params._dummy(), "output_cols",
                        "prediction columns transform() adds (default <label>__output)",
                        typeConverter=TypeConverters.toListString)
    batch_size = Param(Params._dummy(), "batch_size", "rows per rank per step",
                       typeConverter=TypeConverters.toInt)
    val_batch_size = Param(Params._dummy(), "val_batch_size",
                           "rows per validation batch (default batch_size)")
    epochs = Param(Params._dummy(), "epochs", "passes over the data",
                   typeConverter=TypeConverters.toInt)
    validation = Param(Params._dummy(), "validation",
                       "fraction of rows held out (0..1), or the name of a boolean column "
                       "marking validation rows")
    store = Param(Params._dummy(), "store", "the Store holding the data and the model")
    callbacks = Param(Params._dummy(), "callbacks",
                      "keras.callbacks.Callback objects, run on every rank")
    verbose = Param(Params._dummy(), "verbose", "keras.Model.fit's verbose, on rank 0",
                    typeConverter=TypeConverters.toInt)
    run_id = Param(Params._dummy(), "run_id", "the run's name in the store (default: new)",
                   typeConverter=TypeConverters.toString)
    random_seed = Param(Params._dummy(), "random_seed", "seed of shuffling and the split",
                        typeConverter=TypeConverters.toInt)


class KerasEstimator(Estimator, _KerasParams):
    """Trains a Keras 3 model on a Spark DataFrame with ronde (see docs/spark.md)."""

    @keyword_only
    def __init__(self, num_proc=None, model=None, optimizer=None, loss=None, loss_weights=None,
                 metrics=None, custom_objects=None, feature_cols=None, label_cols=None,
                 output_cols=None, batch_size=32, val_batch_size=None, epochs=1,
                 validation=None, store=None, callbacks=None, verbose=1, run_id=None,
                 random_seed=0):
        super().__init__()
        self._setDefault(num_proc=None, loss_weights=None, metrics=None, custom_objects=None,
                         output_cols=None, batch_size=32, val_batch_size=None, epochs=1,
                         validation=None, callbacks=[], verbose=1, run_id=None, random_seed=0)
        self._set(**self._input_kwargs)

    def _check(self):
        import keras
        missing = [name for name in ("model", "optimizer", "loss", "feature_cols",
                                     "label_cols", "store")
                   if self.getOrDefault(name) is None]
        if missing:
            raise ValueError("%s: set %s" % (_WHO, ", ".join(missing)))
        if not isinstance(self.getOrDefault("model"), keras.Model):
            raise ValueError("%s: model must be a keras.Model, not %s"
                             % (_WHO, type(self.getOrDefault("model")).__name__))
        if not isinstance(self.getOrDefault("optimizer"), (keras.optimizers.Optimizer, str)):
            raise ValueError("%s: optimizer must be a keras.optimizers.Optimizer or its name"
                             % _WHO)
        if not isinstance(self.getOrDefault("store"), Store):
            raise ValueError("%s: store must be a ronde.spark.store.Store (Store.create(path))"
                             % _WHO)
        for callback in self.getOrDefault("callbacks") or []:
            if not isinstance(callback, keras.callbacks.Callback):
                raise ValueError("%s: callbacks must be keras.callbacks.Callback objects, not %s"
                                 % (_WHO, type(callback).__name__))
        _data.check_validation(self.getOrDefault("validation"), _WHO)

    def _fit(self, df):
        import keras
        from ronde import spark as ronde_spark
        self._check()
        columns = self.getOrDefault("feature_cols") + self.getOrDefault("label_cols")
        _data.check_columns(df, columns, _WHO)  # before any Spark job starts
        context = df.sparkSession.sparkContext
        num_proc = self.getOrDefault("num_proc") or context.defaultParallelism
        store = self.getOrDefault("store")
        run_id = self.getOrDefault("run_id") or Store.new_run_id()
        label_cols = self.getOrDefault("label_cols")
        output_cols = self.getOrDefault("output_cols") or [c + "__output" for c in label_cols]
        if len(output_cols) != len(label_cols):
            raise ValueError("%s: one output column per label column" % _WHO)
        optimizer = keras.optimizers.get(self.getOrDefault("optimizer"))
        backend = keras.backend.backend()

        train_df, val_df = _data.split(df, self.getOrDefault("validation"),
                                       self.getOrDefault("random_seed"))
        _data.materialize(train_df, columns, store.train_data_path(run_id), num_proc, store,
                          _WHO)
        if val_df is not None:
            _data.materialize(val_df, columns, store.val_data_path(run_id), num_proc, store,
                              _WHO)
        spec = {
            "backend": backend, "model": _train.model_to_bytes(self.getOrDefault("model")),
            "optimizer": keras.optimizers.serialize(optimizer),
            "loss": self.getOrDefault("loss"), "loss_weights": self.getOrDefault("loss_weights"),
            "metrics": self.getOrDefault("metrics"),
            "custom_objects": self.getOrDefault("custom_objects"), "store": store,
            "run_id": run_id, "train_path": store.train_data_path(run_id),
            "val_path": store.val_data_path(run_id) if val_df is not None else None,
            "feature_cols": self.getOrDefault("feature_cols"), "label_cols": label_cols,
            "output_cols": output_cols, "batch_size": self.getOrDefault("batch_size"),
            "val_batch_size": self.getOrDefault("val_batch_size"),
            "epochs": self.getOrDefault("epochs"),
            "callbacks": list(self.getOrDefault("callbacks") or []),
            "verbose": self.getOrDefault("verbose"), "seed": self.getOrDefault("random_seed"),
        }
        results = ronde_spark.run(_train.train, args=(spec,), num_proc=num_proc,
                                  env={"KERAS_BACKEND": backend},
                                  verbose=1 if self.getOrDefault("verbose") else 0)
        checksums = [r["checksum"] for r in results]
        if max(checksums) - min(checksums) > 1e-5 * max(1.0, abs(checksums[0])):
            raise RuntimeError("%s: the ranks ended with different weights (checksums %s)"
                               % (_WHO, checksums))
        return KerasModel.load(store, run_id, self.getOrDefault("custom_objects"))


class KerasModel(Model):
    """A trained model; transform(df) adds one array<double> column of predictions per label
    (a model with several outputs gives output i to label i; otherwise each gets the output).
    getModel() is the compiled keras.Model, getHistory() keras' History.history of rank 0
    (metrics averaged over the ranks)."""

    def __init__(self, model=None, feature_cols=None, label_cols=None, output_cols=None,
                 history=None, run_id=None, backend=None, custom_objects=None):
        super().__init__()
        self.keras_model = model
        self.feature_cols = list(feature_cols or [])
        self.label_cols = list(label_cols or [])
        self.output_cols = list(output_cols or [])
        self.history = dict(history or {})
        self.run_id = run_id
        self.backend = backend
        self.custom_objects = custom_objects

    @classmethod
    def load(cls, store, run_id, custom_objects=None):
        """The model fit() saved as `run_id` in `store` (custom_objects as fit() had them)."""
        path, meta_path = store.keras_model_path(run_id), store.keras_metadata_path(run_id)
        if not store.exists(path) or not store.exists(meta_path):
            raise FileNotFoundError("KerasModel.load: no Keras model %s in the store (%s)"
                                    % (run_id, path))
        meta = json.loads(store.read_bytes(meta_path).decode())
        _train.use_backend(meta["backend"], "KerasModel.load")
        model = _train.model_from_bytes(store.read_bytes(path), custom_objects)
        return cls(model, meta["feature_cols"], meta["label_cols"], meta["output_cols"],
                   meta["history"], run_id, meta["backend"], custom_objects)

    def getModel(self):  # noqa: N802 - Horovod's name
        return self.keras_model

    def getHistory(self):  # noqa: N802 - Horovod's name
        return self.history

    def _transform(self, df):
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType
        _data.check_columns(df, self.feature_cols, "KerasModel.transform")
        model_bytes = _train.model_to_bytes(self.keras_model)
        feature_cols, output_cols = self.feature_cols, self.output_cols
        custom_objects = self.custom_objects
        if self.backend is None:  # a KerasModel made by hand: the driver's backend
            import keras
            self.backend = keras.backend.backend()
        backend = self.backend
        schema = StructType(df.schema.fields + [StructField(c, ArrayType(DoubleType()))
                                                for c in output_cols])

        def predict(batches):
            import numpy as np
            _train.use_backend(backend, "KerasModel.transform")
            if backend == "torch":
                import torch
                torch.set_num_threads(1)
            model = _train.model_from_bytes(model_bytes, custom_objects, compile=False)
            for batch in batches:
                features = _data.features_from_pandas(batch, feature_cols)
                outputs = model.predict(features, batch_size=max(1, len(batch)), verbose=0)
                if not isinstance(outputs, (tuple, list)):
                    outputs = [outputs] * len(output_cols)
                for name, output in zip(output_cols, outputs):
                    values = np.asarray(output, dtype=np.float64).reshape(len(batch), -1)
                    batch[name] = list(values)
                yield batch

        return df.mapInPandas(predict, schema)
