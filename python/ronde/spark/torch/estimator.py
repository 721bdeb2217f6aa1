"""TorchEstimator and TorchModel: Spark ML's Estimator/Model over a ronde job (Horovod's
horovod.spark.torch). fit(df) writes the DataFrame as Parquet into the Store, trains on
num_proc ranks through ronde.spark.run (each rank reads its own files), saves the model in
the store and returns a TorchModel whose transform(df) adds the model's outputs."""

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param.shared import Param, Params, TypeConverters

from ronde.spark import _data
from ronde.spark.store import Store


def _params(owner, names):
    return {name: getattr(owner, name) for name in names}


class _TorchParams(Params):
    num_proc = Param(Params._dummy(), "num_proc", "number of ranks (Spark tasks)",
                     typeConverter=TypeConverters.toInt)
    model = Param(Params._dummy(), "model", "the torch.nn.Module to train")
    optimizer = Param(Params._dummy(), "optimizer",
                      "a torch optimizer over the model's parameters")
    loss = Param(Params._dummy(), "loss",
                 "loss function (outputs, labels) -> scalar, or a list, one per label column")
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
    epochs = Param(Params._dummy(), "epochs", "passes over the data",
                   typeConverter=TypeConverters.toInt)
    validation = Param(Params._dummy(), "validation",
                       "fraction of rows held out (0..1), or the name of a boolean column "
                       "marking validation rows")
    store = Param(Params._dummy(), "store", "the Store holding the data and the model")
    callbacks = Param(Params._dummy(), "callbacks",
                      "callables callback(epoch, metrics) run on every rank after each epoch")
    verbose = Param(Params._dummy(), "verbose", "1: rank 0 prints each epoch's metrics",
                    typeConverter=TypeConverters.toInt)
    run_id = Param(Params._dummy(), "run_id", "the run's name in the store (default: new)",
                   typeConverter=TypeConverters.toString)
    random_seed = Param(Params._dummy(), "random_seed", "seed of shuffling and the split",
                        typeConverter=TypeConverters.toInt)


class TorchEstimator(Estimator, _TorchParams):
    """Trains a torch model on a Spark DataFrame with ronde (see docs/spark.md)."""

    @keyword_only
    def __init__(self, num_proc=None, model=None, optimizer=None, loss=None, feature_cols=None,
                 label_cols=None, output_cols=None, batch_size=32, epochs=1, validation=None,
                 store=None, callbacks=None, verbose=1, run_id=None, random_seed=0):
        super().__init__()
        self._setDefault(batch_size=32, epochs=1, verbose=1, callbacks=[], random_seed=0,
                         validation=None, output_cols=None, run_id=None, num_proc=None)
        self._set(**self._input_kwargs)

    def _check(self):
        import torch
        missing = [name for name in ("model", "optimizer", "loss", "feature_cols",
                                     "label_cols", "store")
                   if self.getOrDefault(name) is None]
        if missing:
            raise ValueError("TorchEstimator: set %s" % ", ".join(missing))
        model, optimizer = self.getOrDefault("model"), self.getOrDefault("optimizer")
        if not isinstance(model, torch.nn.Module):
            raise ValueError("TorchEstimator: model must be a torch.nn.Module, not %s"
                             % type(model).__name__)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError("TorchEstimator: optimizer must be a torch.optim.Optimizer")
        own = {id(p) for p in model.parameters()}
        if any(id(p) not in own for g in optimizer.param_groups for p in g["params"]):
            raise ValueError("TorchEstimator: the optimizer must be over the model's parameters")
        if not isinstance(self.getOrDefault("store"), Store):
            raise ValueError("TorchEstimator: store must be a ronde.spark.store.Store "
                             "(Store.create(path))")
        _data.check_validation(self.getOrDefault("validation"), "TorchEstimator")

    def _split(self, df):
        return _data.split(df, self.getOrDefault("validation"), self.getOrDefault("random_seed"))

    def _materialize(self, df, path, num_proc, store):
        columns = self.getOrDefault("feature_cols") + self.getOrDefault("label_cols")
        _data.materialize(df, columns, path, num_proc, store, "TorchEstimator")

    def _fit(self, df):
        from pyspark import cloudpickle
        from ronde import spark as ronde_spark
        self._check()
        context = df.sparkSession.sparkContext
        num_proc = self.getOrDefault("num_proc") or context.defaultParallelism
        store = self.getOrDefault("store")
        run_id = self.getOrDefault("run_id") or Store.new_run_id()
        label_cols = self.getOrDefault("label_cols")
        output_cols = self.getOrDefault("output_cols") or [c + "__output" for c in label_cols]
        if len(output_cols) != len(label_cols):
            raise ValueError("TorchEstimator: one output column per label column")
        loss = self.getOrDefault("loss")
        loss_fns = list(loss) if isinstance(loss, (list, tuple)) else [loss] * len(label_cols)
        if len(loss_fns) != len(label_cols):
            raise ValueError("TorchEstimator: one loss per label column")

        train_df, val_df = self._split(df)
        self._materialize(train_df, store.train_data_path(run_id), num_proc, store)
        if val_df is not None:
            self._materialize(val_df, store.val_data_path(run_id), num_proc, store)
        spec = {
            "model_and_optimizer": cloudpickle.dumps((self.getOrDefault("model"),
                                                      self.getOrDefault("optimizer"))),
            "loss_fns": loss_fns, "store": store,
            "train_path": store.train_data_path(run_id),
            "val_path": store.val_data_path(run_id) if val_df is not None else None,
            "model_path": store.model_path(run_id),
            "feature_cols": self.getOrDefault("feature_cols"), "label_cols": label_cols,
            "output_cols": output_cols, "batch_size": self.getOrDefault("batch_size"),
            "epochs": self.getOrDefault("epochs"), "callbacks": self.getOrDefault("callbacks"),
            "verbose": self.getOrDefault("verbose"), "seed": self.getOrDefault("random_seed"),
        }
        from ronde.spark.torch import _train
        results = ronde_spark.run(_train.train, args=(spec,), num_proc=num_proc,
                                  verbose=self.getOrDefault("verbose"))
        checksums = [r["checksum"] for r in results]
        if max(checksums) - min(checksums) > 1e-6 * max(1.0, abs(checksums[0])):
            raise RuntimeError("TorchEstimator: the ranks ended with different parameters "
                               "(checksums %s)" % checksums)
        return TorchModel.load(store, run_id)


class TorchModel(Model):
    """A trained model; transform(df) adds one array<double> column of outputs per label
    (a model returning a tuple gives output i to label i; otherwise each gets the output)."""

    def __init__(self, model=None, feature_cols=None, label_cols=None, output_cols=None,
                 history=None, run_id=None):
        super().__init__()
        self.torch_model = model
        self.feature_cols = list(feature_cols or [])
        self.label_cols = list(label_cols or [])
        self.output_cols = list(output_cols or [])
        self.history = list(history or [])
        self.run_id = run_id

    @classmethod
    def load(cls, store, run_id):
        """The model fit() saved as `run_id` in `store`."""
        import io
        import torch
        from pyspark import cloudpickle
        path = store.model_path(run_id)
        if not store.exists(path):
            raise FileNotFoundError("TorchModel.load: no model %s in the store (%s)"
                                    % (run_id, path))
        saved = cloudpickle.loads(store.read_bytes(path))
        model = saved["model"]
        model.load_state_dict(torch.load(io.BytesIO(saved["state_dict"]), weights_only=True))
        return cls(model, saved["feature_cols"], saved["label_cols"], saved["output_cols"],
                   saved["history"], run_id)

    def getModel(self):  # noqa: N802 - Horovod's name
        return self.torch_model

    def getHistory(self):  # noqa: N802 - Horovod's name
        return self.history

    def _transform(self, df):
        from pyspark import cloudpickle
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType
        model_bytes = cloudpickle.dumps(self.torch_model)
        feature_cols, output_cols = self.feature_cols, self.output_cols
        schema = StructType(df.schema.fields + [StructField(c, ArrayType(DoubleType()))
                                                for c in output_cols])

        def predict(batches):
            import numpy as np
            import torch
            model = cloudpickle.loads(model_bytes)
            model.eval()
            torch.set_num_threads(1)
            for batch in batches:
                features = torch.from_numpy(_data.features_from_pandas(batch, feature_cols))
                with torch.no_grad():
                    outputs = model(features)
                if not isinstance(outputs, (tuple, list)):
                    outputs = [outputs] * len(output_cols)
                for name, output in zip(output_cols, outputs):
                    values = output.double().numpy().reshape(len(batch), -1)
                    batch[name] = list(np.asarray(values))
                yield batch

        return df.mapInPandas(predict, schema)
