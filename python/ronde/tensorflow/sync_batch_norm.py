"""Horovod's `hvd.SyncBatchNormalization` on whatever tf.keras is (Keras 3 on the tensorflow
backend, or tf_keras under TF_USE_LEGACY_KERAS=1)."""

import inspect

import tensorflow as tf

_BatchNormalization = tf.keras.layers.BatchNormalization
# tf_keras: _moments(inputs, reduction_axes, keep_dims, mask=None); Keras 3: _moments(inputs,
# mask) over self._reduction_axes.
_MOMENTS_TAKE_AXES = "reduction_axes" in inspect.signature(_BatchNormalization._moments).parameters


def _combine(count, mean, variance, process_set):
    """The moments of the union of every rank's batch, from each rank's element count, mean
    and variance per channel: Chan et al.'s pairwise formula over one allgather, exact for
    batches of any size, and without the cancellation of E[x^2] - E[x]^2."""
    from ronde.tensorflow import allgather
    shape = tf.shape(mean)
    stats = tf.stack([tf.reshape(count, [-1]), tf.reshape(mean, [-1]),
                      tf.reshape(variance, [-1])])
    gathered = allgather(stats, process_set=process_set)
    # Every rank's loss depends on this rank's statistics, so their gradient here is the sum
    # of every rank's; Horovod's allgather gradient is the average (Horovod's own layer sums
    # with an allreduce instead). Same value, gradient times the set's size:
    gathered = tf.stop_gradient(gathered) + process_set.size() * (
        gathered - tf.stop_gradient(gathered))
    gathered = tf.reshape(gathered, [process_set.size(), 3, -1])
    counts, means, variances = gathered[:, 0], gathered[:, 1], gathered[:, 2]
    total = tf.reduce_sum(counts, axis=0)
    global_mean = tf.math.divide_no_nan(tf.reduce_sum(counts * means, axis=0), total)
    spread = variances + tf.square(means - global_mean)
    global_variance = tf.math.divide_no_nan(tf.reduce_sum(counts * spread, axis=0), total)
    return tf.reshape(global_mean, shape), tf.reshape(global_variance, shape)


def _element_count(inputs, axes, mask, dtype):
    """Elements per channel that a batch's moments average over (the mask's weight, if any)."""
    if mask is None:
        shape = tf.shape(inputs)
        return tf.cast(tf.reduce_prod(tf.gather(shape, axes)), dtype)
    weights = tf.cast(mask, dtype)
    while weights.shape.rank < inputs.shape.rank:
        weights = tf.expand_dims(weights, -1)
    return tf.reduce_sum(tf.broadcast_to(weights, tf.shape(inputs)), axis=axes)


class SyncBatchNormalization(_BatchNormalization):
    """Horovod's `SyncBatchNormalization(fused=False, **kwargs)`: batch normalization whose
    training statistics are those of the global batch (every rank's batch together); the
    moving statistics and inference are BatchNormalization's.

    As in Horovod, fused=True or None is a ValueError. Differences: the statistics combine
    each rank's count, mean and variance (exact also when batch sizes differ by rank; Horovod
    averages the ranks' means and mean squares); an unnamed layer gets Keras's unique name
    (Horovod names every unnamed one 'sync_batch_normalization', so two clash in a model)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if _MOMENTS_TAKE_AXES:
            kwargs["fused"] = False  # tf_keras: the fused kernel would bypass _moments
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        from ronde.common.process_sets import global_process_set
        mean, variance = super()._moments(inputs, *args, **kwargs)
        if global_process_set.size() == 1:
            return mean, variance
        bound = inspect.signature(super()._moments).bind(inputs, *args, **kwargs).arguments
        mask = bound.get("mask")
        axes = list(bound["reduction_axes"] if _MOMENTS_TAKE_AXES else self._reduction_axes)
        count = _element_count(inputs, axes, mask, mean.dtype)
        count = tf.broadcast_to(count, tf.shape(mean)) if mask is None else tf.reshape(
            count, tf.shape(mean))
        return _combine(count, mean, variance, global_process_set)
