"""Horovod's reducing collectives as `horovod.tensorflow` exports them (`allreduce`,
`grouped_allreduce`, `reducescatter`, `grouped_reducescatter`): compression around the op,
`tf.IndexedSlices` reduced as two allgathers, and the ops placed on `device_dense` /
`device_sparse`. ronde's kernels run on the host; on a machine with GPUs TensorFlow copies a
tensor to the host for them, as it does for any CPU kernel (soft placement), so a device
string chooses where the surrounding compression and scaling run.
"""

import tensorflow as tf

from ronde.common.process_sets import global_process_set
from ronde.tensorflow import mpi_ops
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.mpi_ops import Adasum, Average, Sum
from ronde.tensorflow.util import handle_average_backwards_compatibility


def _set_size(process_set, dtype):
    """The set's size as a tensor of `dtype`; in a graph read when it runs (elastic worlds)."""
    if tf.executing_eagerly():
        return tf.cast(process_set.size(), dtype)
    return tf.cast(mpi_ops.size_op(process_set_id=process_set.process_set_id), dtype)


def _check_sparse(op, prescale_factor, postscale_factor):
    # Horovod's rules for IndexedSlices, which are allgathered rather than reduced.
    if op == Adasum:
        raise NotImplementedError(
            "The Adasum reduction does not currently support sparse tensors. As a workaround "
            "please pass sparse_as_dense=True to DistributedOptimizer")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _check_adasum(op, process_set):
    # Horovod's checks, made when the op is built (the runtime would refuse when it runs).
    if op != Adasum:
        return
    if process_set.process_set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    size = process_set.size()
    if size & (size - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported "
                                  "yet (%d ranks)." % size)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's `hvd.allreduce`: reduces a tensor, variable or `tf.IndexedSlices` over the
    ranks of `process_set`. IndexedSlices are allgathered (values and indices; Average divides
    the values by the set's size); they take Sum and Average only, without scale factors
    (NotImplementedError, as Horovod). Differentiable: the gradient is the allreduce of the
    gradient with the same op and scales."""
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = mpi_ops.allgather(tensor.values, process_set=process_set,
                                       ignore_name_scope=ignore_name_scope)
            indices = mpi_ops.allgather(tensor.indices, process_set=process_set,
                                        ignore_name_scope=ignore_name_scope)
            if op == Average:
                values = values / _set_size(process_set, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    _check_adasum(op, process_set)
    with tf.device(device_dense):
        compressed, context = compression.compress(tf.convert_to_tensor(tensor))
        reduced = mpi_ops.allreduce_raw(compressed, name, op, prescale_factor, postscale_factor,
                                        process_set, ignore_name_scope)
        return compression.decompress(reduced, context)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Horovod's `hvd.grouped_allreduce`: the dense tensors as one negotiated, fused group, the
    IndexedSlices among them as one group of allgathers (Horovod's rules as in allreduce).
    Returns the results in the order given."""
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    results = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = mpi_ops.grouped_allgather([tensors[i].values for i in sparse],
                                               process_set=process_set,
                                               ignore_name_scope=ignore_name_scope)
            indices = mpi_ops.grouped_allgather([tensors[i].indices for i in sparse],
                                                process_set=process_set,
                                                ignore_name_scope=ignore_name_scope)
            for i, v, ix in zip(sparse, values, indices):
                if op == Average:
                    v = v / _set_size(process_set, v.dtype)
                results[i] = tf.IndexedSlices(v, ix, dense_shape=tensors[i].dense_shape)
    if dense:
        _check_adasum(op, process_set)
        with tf.device(device_dense):
            compressed = [compression.compress(tf.convert_to_tensor(tensors[i])) for i in dense]
            reduced = mpi_ops.grouped_allreduce_raw(
                [c for c, _ in compressed], name, op, prescale_factor, postscale_factor,
                process_set, ignore_name_scope)
            for i, r, (_, ctx) in zip(dense, reduced, compressed):
                results[i] = compression.decompress(r, ctx)
    return results


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's `hvd.reducescatter`: this rank's share of the first dimension of the
    reduction (the first `rows % size` ranks get one extra row). Differentiable for Sum and
    Average."""
    with tf.device(device_dense):
        compressed, context = compression.compress(tf.convert_to_tensor(tensor))
        reduced = mpi_ops.reducescatter_raw(compressed, name, op, prescale_factor,
                                            postscale_factor, process_set, ignore_name_scope)
        return compression.decompress(reduced, context)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None, ignore_name_scope=False):
    """Horovod's `hvd.grouped_reducescatter`: one negotiated group of reducescatters."""
    if not tensors:
        return tensors
    with tf.device(device_dense):
        compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
        reduced = mpi_ops.grouped_reducescatter_raw(
            [c for c, _ in compressed], name, op, prescale_factor, postscale_factor,
            process_set, ignore_name_scope)
        return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]
