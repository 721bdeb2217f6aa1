"""ronde.tensorflow.keras.callbacks on whatever tf.keras is: broadcast, metric averaging, the
learning-rate schedules batch by batch against Horovod's formulas, momentum correction, the
best-model checkpoint and load_model."""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow.keras as hvd
from tfk_support import (KERAS2, KINDS, PER_RANK, STEPS, all_equal, assert_weights_close, data,
                         fit, keras, make_model, optimizers, shard)


class Recorder(keras.callbacks.Callback):
    """Reads the optimizer's hyperparameters at each batch's start (after the callbacks before
    it have set them) and end, and keeps the epochs' logs."""

    def __init__(self):
        super().__init__()
        self.epoch_logs, self.batch_lr, self.momentum_in, self.momentum_out = [], [], [], []

    def _value(self, x):
        return float(keras.backend.get_value(x)) if isinstance(x, tf.Variable) else float(x)

    def on_train_batch_begin(self, batch, logs=None):
        opt = self.model.optimizer
        self.batch_lr.append(self._value(opt.learning_rate))
        if hasattr(opt, "momentum"):
            self.momentum_in.append(self._value(opt.momentum))

    def on_train_batch_end(self, batch, logs=None):
        if hasattr(self.model.optimizer, "momentum"):
            self.momentum_out.append(self._value(self.model.optimizer.momentum))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))


@pytest.mark.parametrize("kind", KINDS)
def test_broadcast_and_metric_average(kind):
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    model = make_model(seed=100 + r)  # different initial weights on every rank
    raw = Recorder()
    history = fit(model, hvd.DistributedOptimizer(optimizers(kind).SGD(0.05)), *shard(x, y),
                  batch=PER_RANK, epochs=2,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                             hvd.callbacks.MetricAverageCallback()])
    assert all_equal(model)
    reference = make_model(seed=100)
    fit(reference, optimizers(kind).SGD(0.05), x, y, batch=PER_RANK * n, epochs=2)
    assert_weights_close(model, reference)
    local = hvd.allgather_object([logs["loss"] for logs in raw.epoch_logs])
    np.testing.assert_allclose(history.history["loss"], np.mean(local, axis=0), rtol=1e-6)


def test_broadcast_keeps_local_variables():
    r = hvd.rank()
    x, y = data(hvd.size())
    model = make_model(seed=100 + r)
    own_bias = model.layers[-1].bias
    before = own_bias.numpy().copy()
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=own_bias)
    fit(model, keras.optimizers.SGD(0.0), *shard(x, y), batch=PER_RANK, callbacks=[callback])
    np.testing.assert_array_equal(own_bias.numpy(), before)  # lr 0: untouched, not broadcast
    kernels = hvd.allgather_object(model.layers[0].kernel.numpy().tolist())
    assert all(k == kernels[0] for k in kernels)
    with pytest.raises(ValueError, match="tf.Variable"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=["bias"])


@pytest.mark.parametrize("kind", KINDS)
def test_warmup_and_schedule_follow_horovod(kind):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    record = Recorder()
    history = fit(model, hvd.DistributedOptimizer(optimizers(kind).SGD(0.1)), *shard(x, y),
                  batch=PER_RANK, epochs=4,
                  callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=2,
                                                                     momentum_correction=False),
                             hvd.callbacks.LearningRateScheduleCallback(0.1, 0.5, start_epoch=2,
                                                                        momentum_correction=False),
                             record])
    # Horovod's warmup: epoch shifted by one batch; a constant multiplier m: m ** (epoch - 2).
    warm = [0.1 / n * ((e + (b + 1) / STEPS) * (n - 1) / 2 + 1)
            for e in range(2) for b in range(STEPS)]
    expected = warm + [0.1] * STEPS + [0.05] * STEPS
    np.testing.assert_allclose(record.batch_lr, expected, rtol=1e-6)
    np.testing.assert_allclose(history.history["lr"], [warm[STEPS - 1], 0.1, 0.1, 0.05],
                               rtol=1e-6)


def test_momentum_correction():
    x, y = data(hvd.size())
    model = make_model()
    record = Recorder()
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.1, lambda epoch: 1.0 + epoch,
                                                          staircase=False)
    opt_family = optimizers("legacy" if KERAS2 else "new")
    optimizer = hvd.DistributedOptimizer(opt_family.SGD(0.1, momentum=0.9))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, optimizer, *shard(x, y), batch=PER_RANK, callbacks=[schedule, record])
    lrs = [0.1 * (1.0 + b / STEPS) for b in range(STEPS)]
    np.testing.assert_allclose(record.batch_lr, lrs, rtol=1e-6)
    if KERAS2:  # legacy SGD: a momentum variable, scaled by new_lr / old_lr for one batch
        old = [0.1] + lrs[:-1]
        np.testing.assert_allclose(record.momentum_in,
                                   [0.9 * new / prev for new, prev in zip(lrs, old)], rtol=1e-5)
        np.testing.assert_allclose(record.momentum_out, [0.9] * STEPS, rtol=1e-6)
        assert not [w for w in caught if "momentum_correction" in str(w.message)]
    else:  # a constant of the compiled step: it says so
        assert [w for w in caught if "momentum_correction" in str(w.message)]


def test_schedule_needs_initial_lr():
    with pytest.raises(ValueError, match="initial_lr"):
        hvd.callbacks.LearningRateScheduleCallback(None, 0.5)


def test_best_model_checkpoint_and_load_model(tmp_path):
    n = hvd.size()
    x, y = data(n)
    suffix = ".h5" if KERAS2 else ".keras"
    path = hvd.broadcast_object(str(tmp_path / ("best" + suffix)), root_rank=0)
    model = make_model()
    checkpoint = hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=path)
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), *shard(x, y),
        batch=PER_RANK, epochs=2, callbacks=[hvd.callbacks.MetricAverageCallback(), checkpoint])
    written = hvd.allgather_object(os.path.exists(path))
    assert written[0]
    loaded = hvd.load_model(path, compression=hvd.Compression.fp16)
    assert getattr(loaded.optimizer, "_ronde_distributed", False)
    assert_weights_close(loaded, model)  # the loss fell: the best model is the last one
    loaded.fit(*shard(x, y), batch_size=PER_RANK, epochs=1, shuffle=False, verbose=0)
    assert all_equal(loaded)


def test_load_model_legacy_opts(tmp_path):
    """tf_keras: legacy_opts=True loads built-in optimizers as legacy classes, as Horovod does;
    Keras 3 has none and refuses it."""
    path = str(tmp_path / ("model_%d.h5" % hvd.rank()))
    model = make_model()
    if not KERAS2:
        with pytest.raises(ValueError, match="legacy"):
            hvd.load_model(path, legacy_opts=True)
        return
    fit(model, keras.optimizers.legacy.SGD(0.1, momentum=0.5), *data(1), batch=PER_RANK)
    model.save(path)
    loaded = hvd.load_model(path, legacy_opts=True)
    assert isinstance(loaded.optimizer, keras.optimizers.legacy.SGD)
    assert getattr(loaded.optimizer, "_ronde_distributed", False)
    # Without legacy_opts the built-in names mean the new classes, which refuse a legacy
    # optimizer's config (so does Horovod); a model saved with a new optimizer loads so.
    with pytest.raises(ValueError, match="legacy"):
        hvd.load_model(path)
    fit(model, keras.optimizers.SGD(0.1), *data(1), batch=PER_RANK)
    model.save(path)
    new = hvd.load_model(path)
    assert isinstance(new.optimizer, keras.optimizers.SGD)
    assert getattr(new.optimizer, "_ronde_distributed", False)
