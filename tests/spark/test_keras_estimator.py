"""KerasEstimator (Keras 3 on its torch backend, no TensorFlow) on the digits data: fit from a
DataFrame, transform, reload from the store; bad input named before any training starts."""

import os
import sys

# Keras picks its backend at its first import: the driver's choice is what the ranks get.
os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

from test_torch_estimator import digits_frames  # noqa: E402

# The ranks cannot import this test module: its functions and classes travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class MarkEpochs(keras.callbacks.Callback):
    """Leaves a file per rank and epoch, so the test sees the callback ran on every rank."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def on_epoch_end(self, epoch, logs=None):
        assert "loss" in logs and "val_accuracy" in logs
        name = "rank%s-epoch%d" % (os.environ["RONDE_RANK"], epoch)
        open(os.path.join(self.folder, name), "w").close()


def make_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                             keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])


def test_keras_estimator_learns_the_digits(spark, tmp_path):
    from ronde.spark.keras import KerasEstimator, KerasModel, Store

    assert keras.backend.backend() == os.environ["KERAS_BACKEND"]
    store = Store.create(str(tmp_path / "store"))
    marks = str(tmp_path / "marks")
    os.makedirs(marks)
    epochs = 12
    estimator = KerasEstimator(
        num_proc=2, model=make_model(),
        optimizer=keras.optimizers.Adam(learning_rate=0.001),  # fit() scales it by 2 ranks
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
        feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=epochs,
        validation=0.1, store=store, callbacks=[MarkEpochs(marks)], run_id="digits", verbose=2)
    train, test = digits_frames(spark)
    fitted = estimator.fit(train)
    history = fitted.getHistory()
    assert len(history["loss"]) == epochs and history["loss"][-1] < history["loss"][0]
    assert history["val_accuracy"][-1] > 0.9
    assert sorted(os.listdir(marks)) == sorted("rank%d-epoch%d" % (r, e)
                                               for r in range(2) for e in range(epochs))

    rows = fitted.transform(test).select("features", "label", "label__output").collect()
    outputs = np.array([r["label__output"] for r in rows])
    labels = np.array([r["label"] for r in rows])
    assert outputs.shape == (len(rows), 10)
    assert np.mean(outputs.argmax(axis=1) == labels) >= 0.95

    # Saved in the store: KerasModel.load and plain keras.models.load_model give the model back.
    assert len(store.list_parquet_files(store.train_data_path("digits"))) >= 2
    loaded = KerasModel.load(store, "digits")
    assert loaded.getHistory() == history and loaded.output_cols == ["label__output"]
    for a, b in zip(fitted.getModel().get_weights(), loaded.getModel().get_weights()):
        np.testing.assert_array_equal(a, b)
    # The executors' predictions are the saved model's.
    plain = keras.models.load_model(store.keras_model_path("digits"))
    features = np.array([r["features"] for r in rows], dtype=np.float32)
    np.testing.assert_allclose(plain.predict(features, verbose=0), outputs, rtol=1e-4,
                               atol=1e-5)


def test_missing_columns_are_named(spark, tmp_path):
    from ronde.spark.keras import KerasEstimator, KerasModel, Store
    store = Store.create(str(tmp_path))
    estimator = KerasEstimator(num_proc=2, model=make_model(), optimizer="sgd",
                               loss="sparse_categorical_crossentropy", feature_cols=["pixels"],
                               label_cols=["label"], store=store)
    df = spark.createDataFrame([([0.0] * 64, 1)], "features array<float>, label long")
    with pytest.raises(ValueError, match="KerasEstimator: the DataFrame has no column pixels"):
        estimator.fit(df)
    trained = KerasModel(make_model(), ["pixels"], ["label"], ["label__output"], {}, "x",
                         keras.backend.backend())
    with pytest.raises(ValueError, match="KerasModel.transform: the DataFrame has no column"):
        trained.transform(df)


def test_bad_params_are_clear_errors(tmp_path):
    from ronde.spark.keras import KerasEstimator, KerasModel, Store
    store = Store.create(str(tmp_path))

    def fit_with(**params):
        base = dict(num_proc=2, model=make_model(), optimizer="sgd", loss="mse",
                    feature_cols=["features"], label_cols=["label"], store=store)
        base.update(params)
        KerasEstimator(**base)._check()

    with pytest.raises(ValueError, match="model must be a keras.Model, not str"):
        fit_with(model="a model")
    with pytest.raises(ValueError, match="set loss"):
        fit_with(loss=None)
    with pytest.raises(ValueError, match="callbacks must be keras.callbacks.Callback"):
        fit_with(callbacks=[lambda epoch, logs: None])
    with pytest.raises(ValueError, match=r"validation as a fraction must be in \[0, 1\)"):
        fit_with(validation=1.5)
    with pytest.raises(FileNotFoundError, match="no Keras model nope in the store"):
        KerasModel.load(store, "nope")
