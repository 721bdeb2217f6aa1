"""TorchEstimator on the digits data: fit from a DataFrame, transform, save and load."""

import gzip
import importlib.util
import os
import sys

import numpy as np
import pytest
from pyspark import cloudpickle

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def digits_path():
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        found = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                             "digits.csv.gz")
        if os.path.exists(found):
            return found
    return "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def digits_frames(spark):
    """(train, test) DataFrames: features array<float> (64 pixels / 16), label long."""
    with gzip.open(digits_path(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    order = np.random.default_rng(0).permutation(len(table))
    rows = [(table[i, :64] / 16.0).tolist() for i in order]
    labels = [int(table[i, 64]) for i in order]
    n_test = len(rows) // 5
    data = [(features, label, i < n_test) for i, (features, label) in enumerate(zip(rows, labels))]
    df = spark.createDataFrame(data, "features array<float>, label long, is_test boolean")
    return df.filter("not is_test"), df.filter("is_test")


class Net:  # built lazily so that importing the test module needs no torch
    @staticmethod
    def make():
        import torch.nn as nn
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                             nn.Linear(64, 10))


def test_torch_estimator_learns_the_digits(spark, tmp_path):
    import torch
    import torch.nn.functional as F
    from ronde.spark.torch import Store, TorchEstimator, TorchModel

    torch.manual_seed(0)
    model = Net.make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    store = Store.create(str(tmp_path / "store"))
    marks = str(tmp_path / "marks")
    os.makedirs(marks)

    def mark_epoch(epoch, metrics):  # runs on every rank, in the rank's process
        assert "train_loss" in metrics
        open(os.path.join(marks, "rank%s-epoch%d" % (os.environ["RONDE_RANK"], epoch)), "w").close()

    estimator = TorchEstimator(num_proc=2, model=model, optimizer=optimizer,
                               loss=F.cross_entropy, feature_cols=["features"],
                               label_cols=["label"], batch_size=32, epochs=8, validation=0.1,
                               store=store, callbacks=[mark_epoch],
                               run_id="digits", verbose=1)
    train, test = digits_frames(spark)
    fitted = estimator.fit(train)
    history = fitted.getHistory()
    assert len(history) == 8 and history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_accuracy"] > 0.9
    assert sorted(os.listdir(marks)) == sorted("rank%d-epoch%d" % (r, e)
                                               for r in range(2) for e in range(8))

    def accuracy(model_):
        rows = model_.transform(test).select("label", "label__output").collect()
        return np.mean([int(np.argmax(r["label__output"])) == r["label"] for r in rows])

    assert accuracy(fitted) >= 0.95
    # Saved in the store: a fresh load predicts the same.
    assert os.path.exists(store.model_path("digits"))
    assert len(store.list_parquet_files(store.train_data_path("digits"))) >= 2
    loaded = TorchModel.load(store, "digits")
    fitted_state, loaded_state = fitted.getModel().state_dict(), loaded.getModel().state_dict()
    assert fitted_state.keys() == loaded_state.keys()
    assert all(torch.equal(fitted_state[k], loaded_state[k]) for k in fitted_state)
    assert loaded.getHistory() == history and loaded.output_cols == ["label__output"]


def test_an_unwritable_store_path_is_a_clear_error(tmp_path):
    from ronde.spark.torch import Store
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="is not writable"):
        Store.create(str(blocker / "store"))
    with pytest.raises(ValueError, match="no store for the hdfs:// scheme"):
        Store.create("hdfs://namenode/ronde")


def test_missing_columns_are_named(spark, tmp_path):
    import torch
    import torch.nn.functional as F
    from ronde.spark.torch import Store, TorchEstimator
    model = Net.make()
    estimator = TorchEstimator(num_proc=2, model=model,
                               optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                               loss=F.cross_entropy, feature_cols=["pixels"],
                               label_cols=["label"], store=Store.create(str(tmp_path)))
    df = spark.createDataFrame([([0.0] * 64, 1)], "features array<float>, label long")
    with pytest.raises(ValueError, match="no column pixels"):
        estimator.fit(df)
