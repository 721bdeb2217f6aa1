"""ronde.keras on the backend in KERAS_BACKEND: DistributedOptimizer in model.fit against
one process on the combined batch, the callbacks, load_model."""

import os

import keras
import numpy as np
import pytest

import ronde.keras as hvd

PER_RANK = 4
STEPS = 4


def data(n):
    rng = np.random.RandomState(11)
    x = rng.rand(STEPS * PER_RANK * n, 3).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def shard(x, y):
    """This rank's rows such that step s of every rank together is step s of the full data."""
    n, r = hvd.size(), hvd.rank()
    rows = [s * PER_RANK * n + r * PER_RANK + i for s in range(STEPS) for i in range(PER_RANK)]
    return x[rows], y[rows]


def make_model(seed=5):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
    return model


def fit(model, optimizer, x, y, batch, callbacks=(), epochs=1):
    model.compile(optimizer=optimizer, loss="mse")
    return model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=list(callbacks))


def assert_weights_close(a, b, tol=1e-5):
    for got, want in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("passes", [1, 2])
def test_distributed_optimizer_matches_combined_batch(passes):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=passes,
                                   average_aggregated_gradients=True)
    fit(model, opt, *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.SGD(0.1, gradient_accumulation_steps=passes if passes > 1
                                        else None), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference)


def test_distributed_optimizer_adam_and_fp16():
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    fit(model, hvd.DistributedOptimizer(keras.optimizers.Adam(0.01),
                                        compression=hvd.Compression.fp16), *shard(x, y),
        batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.Adam(0.01), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference, tol=2e-3)


def test_wrapping_twice_or_a_non_optimizer_fails():
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="already"):
        hvd.DistributedOptimizer(opt)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer("sgd")


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch_logs, self.batch_lr = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.batch_lr.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))


def test_broadcast_and_metric_average_callbacks():
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    model = make_model(seed=100 + r)  # different initial weights on every rank
    raw = Recorder()
    history = fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), *shard(x, y),
                  batch=PER_RANK, epochs=2,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                             hvd.callbacks.MetricAverageCallback()])
    weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
    assert all(w == weights[0] for w in weights)
    # Rank 0's start, combined batch: the same weights as one process from rank 0's seed.
    reference = make_model(seed=100)
    fit(reference, keras.optimizers.SGD(0.05), x, y, batch=PER_RANK * n, epochs=2)
    assert_weights_close(model, reference)
    local = hvd.allgather_object([logs["loss"] for logs in raw.epoch_logs])
    np.testing.assert_allclose(history.history["loss"], np.mean(local, axis=0), rtol=1e-6)


def test_learning_rate_warmup_and_schedule():
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    record = Recorder()
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), *shard(x, y),
        batch=PER_RANK, epochs=3,
        callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=2,
                                                           momentum_correction=False),
                   hvd.callbacks.LearningRateScheduleCallback(0.1, lambda e: 0.5, start_epoch=2,
                                                              momentum_correction=False),
                   record])
    # Horovod's warmup shifts the epoch by one batch, so its last batch reaches 0.1.
    expected = [0.1 / n * ((e + (b + 1) / STEPS) * (n - 1) / 2 + 1)
                for e in range(2) for b in range(STEPS)] + [0.05] * STEPS
    np.testing.assert_allclose(record.batch_lr, expected, rtol=1e-6)
    np.testing.assert_allclose([logs["lr"] for logs in record.epoch_logs],
                               [expected[STEPS - 1], 0.1, 0.05], rtol=1e-6)


def test_best_model_checkpoint_and_load_model(tmp_path):
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    path = hvd.broadcast_object(str(tmp_path / "best.keras"), root_rank=0)
    model = make_model()
    checkpoint = hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=path)
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), *shard(x, y),
        batch=PER_RANK, epochs=2, callbacks=[hvd.callbacks.MetricAverageCallback(), checkpoint])
    hvd.allgather_object(None)
    assert os.path.exists(path)
    loaded = hvd.load_model(path)
    assert getattr(loaded.optimizer, "_ronde_distributed", False)
    # The loss fell, so the best model is the last one.
    assert_weights_close(loaded, model)
    loaded.fit(*shard(x, y), batch_size=PER_RANK, epochs=1, shuffle=False, verbose=0)
    weights = hvd.allgather_object([w.tolist() for w in loaded.get_weights()])
    assert all(w == weights[0] for w in weights)
