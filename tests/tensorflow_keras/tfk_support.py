"""Data, models and references shared by the tests: every rank's step s together is step s of
one process training on the combined batch, which is the reference."""

import numpy as np
import tensorflow as tf

import ronde.tensorflow.keras as hvd
from ronde.tensorflow.keras.world import tf_keras_is_keras2

keras = tf.keras
KERAS2 = tf_keras_is_keras2()
PER_RANK = 4
STEPS = 4
# The optimizer families of this world: tf_keras has its legacy OptimizerV2 ones besides.
KINDS = ["new", "legacy"] if KERAS2 else ["new"]


def optimizers(kind):
    return keras.optimizers.legacy if kind == "legacy" else keras.optimizers


def data(n, steps=STEPS, features=3):
    rng = np.random.RandomState(11)
    x = rng.rand(steps * PER_RANK * n, features).astype(np.float32)
    w = np.linspace(1.0, -1.0, features).astype(np.float32).reshape(features, 1)
    y = (x @ w + 0.3).astype(np.float32)
    return x, y


def rows_of(rank, n, steps=STEPS):
    return [s * PER_RANK * n + rank * PER_RANK + i for s in range(steps) for i in range(PER_RANK)]


def shard(x, y, rank=None, n=None):
    """This rank's rows such that step s of every rank together is step s of the full data."""
    rank = hvd.rank() if rank is None else rank
    n = hvd.size() if n is None else n
    rows = rows_of(rank, n, len(x) // (PER_RANK * n))
    return x[rows], y[rows]


def make_model(seed=5, features=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((features,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def fit(model, optimizer, x, y, batch, callbacks=(), epochs=1, loss="mse"):
    model.compile(optimizer=optimizer, loss=loss)
    return model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=list(callbacks))


def assert_weights_close(a, b, tol=1e-5):
    for got, want in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def all_equal(model):
    weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
    return all(w == weights[0] for w in weights)


def numpy_adasum(tensors):
    """Adasum of the ranks' tensors in rank order: pairs (0,1), (2,3), ..., then pairs of pairs;
    a' = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b."""
    tensors = [np.asarray(t, np.float64) for t in tensors]
    while len(tensors) > 1:
        combined = []
        for a, b in zip(tensors[0::2], tensors[1::2]):
            dot, aa, bb = float((a * b).sum()), float((a * a).sum()), float((b * b).sum())
            combined.append((1 - dot / (2 * aa) if aa > 0 else 1) * a
                            + (1 - dot / (2 * bb) if bb > 0 else 1) * b)
        tensors = combined
    return tensors[0]
