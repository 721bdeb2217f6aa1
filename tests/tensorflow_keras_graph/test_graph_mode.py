"""ronde.tensorflow.keras with tf_keras in TF1 graph mode: DistributedOptimizer (get_gradients)
against one process on the combined batch, the callbacks run through Keras's session, and the
keras-level collectives evaluated there."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow.keras as hvd
from ronde.tensorflow.sync_batch_norm import SyncBatchNormalization

keras = tf.keras
PER_RANK = 4
STEPS = 4


def data(n):
    rng = np.random.RandomState(11)
    x = rng.rand(STEPS * PER_RANK * n, 3).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def shard(x, y):
    n, r = hvd.size(), hvd.rank()
    rows = [s * PER_RANK * n + r * PER_RANK + i for s in range(len(x) // (PER_RANK * n))
            for i in range(PER_RANK)]
    return x[rows], y[rows]


def make_model(seed=5, middle=None):
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(4, input_shape=(3,))]
    if middle is not None:
        layers.append(middle())
    layers += [keras.layers.Activation("tanh"), keras.layers.Dense(1)]
    return keras.Sequential(layers)


def fit(model, optimizer, x, y, batch, callbacks=(), epochs=1):
    model.compile(optimizer=optimizer, loss="mse")
    return model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=list(callbacks))


def assert_weights_close(a, b, tol=1e-5):
    for got, want in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_graph_mode_is_on():
    assert not tf.executing_eagerly()


@pytest.mark.parametrize("op", ["average", "sum"])
def test_fit_matches_combined_batch(op):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    fit(model, hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1),
                                        op=hvd.Average if op == "average" else hvd.Sum),
        *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.legacy.SGD(0.1 if op == "average" else 0.1 * n), x, y,
        batch=PER_RANK * n)
    assert_weights_close(model, reference)


def test_backward_passes_per_step():
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1), backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    fit(model, opt, *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.legacy.SGD(0.1), x, y, batch=2 * PER_RANK * n)
    assert_weights_close(model, reference)
    assert int(keras.backend.get_value(opt.iterations)) == STEPS


def test_groups_and_fp16():
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    fit(model, hvd.DistributedOptimizer(keras.optimizers.legacy.Adam(0.01), groups=2,
                                        compression=hvd.Compression.fp16),
        *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.legacy.Adam(0.01), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference, tol=2e-3)


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.lr, self.momentum, self.losses = [], [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.lr.append(float(keras.backend.get_value(self.model.optimizer.learning_rate)))
        self.momentum.append(float(keras.backend.get_value(self.model.optimizer.momentum)))

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))


def test_callbacks_in_the_session():
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    model = make_model(seed=100 + r)  # differs by rank until the broadcast
    record = Recorder()
    history = fit(model, hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.05,
                                                                                momentum=0.5)),
                  *shard(x, y), batch=PER_RANK, epochs=2,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             hvd.callbacks.LearningRateScheduleCallback(
                                 0.05, lambda epoch: 1.0 + epoch, staircase=False),
                             record, hvd.callbacks.MetricAverageCallback()])
    weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
    assert all(w == weights[0] for w in weights)
    lrs = [0.05 * (1.0 + e + b / STEPS) for e in range(2) for b in range(STEPS)]
    np.testing.assert_allclose(record.lr, lrs, rtol=1e-6)
    # Momentum corrected for the batch after each change (restored after it).
    np.testing.assert_allclose(record.momentum,
                               [0.5 * new / old for new, old in zip(lrs, [0.05] + lrs[:-1])],
                               rtol=1e-5)
    local = hvd.allgather_object(record.losses)
    np.testing.assert_allclose(history.history["loss"], np.mean(local, axis=0), rtol=1e-6)
    np.testing.assert_allclose(history.history["lr"], [lrs[STEPS - 1], lrs[-1]], rtol=1e-6)


def test_sync_batch_norm_fit():
    n = hvd.size()
    x, y = data(n)
    model = make_model(middle=SyncBatchNormalization)
    fit(model, hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)), *shard(x, y),
        batch=PER_RANK)
    reference = make_model(middle=lambda: keras.layers.BatchNormalization(fused=False))
    fit(reference, keras.optimizers.legacy.SGD(0.1), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference, tol=1e-4)


def test_values_and_global_variables_through_the_session():
    n, r = hvd.size(), hvd.rank()
    mine = np.full((2, 2), r + 1, np.float32)
    reduced = hvd.allreduce(mine, op=hvd.Sum)
    assert isinstance(reduced, np.ndarray)  # evaluated in K.get_session(), as Horovod does
    np.testing.assert_allclose(reduced, np.full((2, 2), n * (n + 1) / 2))
    np.testing.assert_array_equal(hvd.allgather(np.array([r], np.int32)), np.arange(n))
    np.testing.assert_array_equal(hvd.broadcast(mine, n - 1), np.full((2, 2), n, np.float32))
    share = hvd.reducescatter(np.ones((n, 1), np.float32), op=hvd.Sum)
    np.testing.assert_allclose(share, [[n]])
    variable = tf.compat.v1.Variable(np.float32(10 * r + 1), name="per_rank_%d" % r)
    session = tf.compat.v1.keras.backend.get_session()
    session.run(variable.initializer)
    hvd.broadcast_global_variables(0)
    assert float(session.run(variable)) == 1.0
