"""SyncBatchNormalization against batch normalization of the combined batch, and mixed precision
(LossScaleOptimizer inside DistributedOptimizer, fp16 and fp32 gradients side by side)."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow.keras as hvd
from ronde.tensorflow.sync_batch_norm import SyncBatchNormalization
from tfk_support import (KERAS2, KINDS, PER_RANK, STEPS, assert_weights_close, data, fit, keras,
                         optimizers, shard)


def global_batch(rows_by_rank, features=3):
    """Rank r's batch has rows_by_rank(r) rows, drawn the same way on every rank."""
    batches = []
    for r in range(hvd.size()):
        rng = np.random.RandomState(50 + r)
        batches.append((rng.rand(rows_by_rank(r), features) * (r + 1)).astype(np.float32))
    return batches


@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("traced", [False, True])
def test_batch_statistics_are_the_global_batch(uneven, traced):
    batches = global_batch((lambda r: 2 + r) if uneven else (lambda r: PER_RANK))
    mine, everything = batches[hvd.rank()], np.concatenate(batches)
    layer = SyncBatchNormalization(momentum=0.5, epsilon=1e-3)
    call = (lambda x: layer(x, training=True))
    if traced:
        call = tf.function(call)
    out = np.asarray(call(tf.constant(mine)))
    mean, var = everything.mean(axis=0), everything.var(axis=0)
    np.testing.assert_allclose(out, (mine - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.5 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.5 + 0.5 * var, rtol=1e-4)
    inference = np.asarray(layer(tf.constant(mine), training=False))  # no collective
    np.testing.assert_allclose(
        inference, (mine - layer.moving_mean.numpy())
        / np.sqrt(layer.moving_variance.numpy() + 1e-3), rtol=1e-4, atol=1e-4)


def test_fused_is_refused():
    with pytest.raises(ValueError, match="fused"):
        SyncBatchNormalization(fused=True)
    with pytest.raises(ValueError, match="fused"):
        SyncBatchNormalization(fused=None)


def bn_model(layer_class, seed=9):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), layer_class(),
                             keras.layers.Activation("tanh"), keras.layers.Dense(1)])


def test_training_matches_batch_norm_on_the_combined_batch():
    n = hvd.size()
    x, y = data(n)
    model = bn_model(SyncBatchNormalization)
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), *shard(x, y), batch=PER_RANK)
    reference = bn_model(keras.layers.BatchNormalization)
    fit(reference, keras.optimizers.SGD(0.1), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference, tol=1e-4)  # moving statistics included


def mixed_model(seed=13):
    """A float16 layer (float16 variables and gradients) between mixed_float16 ones (float32
    variables and gradients)."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(4, activation="tanh", dtype="float16"),
                             keras.layers.Dense(1, dtype="float32")])


def loss_scaled(kind, lr):
    return keras.mixed_precision.LossScaleOptimizer(optimizers(kind).SGD(lr), initial_scale=256)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("groups", [None, 1])
def test_mixed_precision(kind, groups):
    n = hvd.size()
    x, y = data(n)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = mixed_model()
        dtypes = {v.dtype if isinstance(v.dtype, str) else v.dtype.name
                  for v in model.trainable_variables}
        assert dtypes == {"float16", "float32"}
        # groups=1: every gradient in one grouped request, float16 and float32 together.
        opt = hvd.DistributedOptimizer(loss_scaled(kind, 0.1), groups=groups)
        fit(model, opt, *shard(x, y), batch=PER_RANK, epochs=2)
        reference = mixed_model()
        fit(reference, loss_scaled(kind, 0.1), x, y, batch=PER_RANK * n, epochs=2)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    changed = [np.abs(w - w0).max() for w, w0 in zip(model.get_weights(),
                                                     mixed_model().get_weights())]
    assert min(changed) > 1e-3  # every layer trained (no step skipped for overflow)
    assert_weights_close(model, reference, tol=5e-3)
