"""The gradients of the compiled kernels' ops, registered with TensorFlow (Horovod registers
its ops' gradients the same way): the op is recorded on the tape like any TensorFlow op, where
a tf.custom_gradient wrapper cost about 0.2 ms per eager call. The formulas are those of the
numpy path's custom gradients (Horovod's), and every gradient is itself a collective that
every rank builds alike (unnamed, so numbered in order).
"""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import process_set_by_id

# Horovod's op number for each ReduceOp code of the ops' reduce_op attribute.
_OPS_BY_CODE = {int(core): op for op, core in nops._CORE_OPS.items()}


def _attrs(op):
    """(Horovod op, prescale, postscale, process set) of a reducing op."""
    return (_OPS_BY_CODE[op.get_attr("reduce_op")], float(op.get_attr("prescale_factor")),
            float(op.get_attr("postscale_factor")), process_set_by_id(op.get_attr("process_set_id")))


def _filled(grads, outputs):
    # Every rank must submit every member: an output nobody differentiates gets zeros.
    return [tf.zeros_like(o) if g is None else g for g, o in zip(grads, outputs)]


def _my_rows(summed, x, counts, process_set):
    """This rank's rows of an allgather's summed gradient, shaped as its input `x`."""
    rows = tf.shape(x, out_type=tf.int64)[0] if x.shape.rank else tf.constant(1, tf.int64)
    offset = tf.reduce_sum(counts[:process_set.rank()])
    return tf.reshape(summed[offset:offset + rows], tf.shape(x))


def _rows_of(x):
    return tf.reshape(tf.shape(x, out_type=tf.int64)[0] if x.shape.rank else
                      tf.constant(1, tf.int64), [1])


def _scatter_scale(op, pre, post, process_set, dtype):
    if op not in (nops.Sum, nops.Average):
        raise NotImplementedError("reducescatter has a gradient for Sum and Average only")
    scale = pre * post / (process_set.size() if op == nops.Average else 1)
    return tf.cast(scale, dtype)


def register(mpi_ops):
    """Registers the gradients; `mpi_ops` is ronde.tensorflow.mpi_ops (its raw collectives)."""

    @tf.RegisterGradient("RondeAllreduce")
    def _allreduce(op, grad):
        # The gradient of an allreduce is the allreduce of the gradient, scaled alike.
        reduce_op, pre, post, process_set = _attrs(op)
        return mpi_ops._allreduce_raw(grad, None, reduce_op, pre, post, process_set)

    @tf.RegisterGradient("RondeGroupedAllreduce")
    def _grouped_allreduce(op, *grads):
        reduce_op, pre, post, process_set = _attrs(op)
        return mpi_ops._grouped_raw(_filled(grads, op.outputs), None, reduce_op, pre, post,
                                    process_set)

    @tf.RegisterGradient("RondeAllgather")
    def _allgather(op, grad):
        # Horovod's rule: this rank's rows of the summed gradient.
        process_set = process_set_by_id(op.get_attr("process_set_id"))
        x = op.inputs[0]
        summed = mpi_ops._allreduce_raw(grad, None, nops.Sum, 1.0, 1.0, process_set)
        counts = mpi_ops._allgather_raw(_rows_of(x), None, process_set)
        return _my_rows(summed, x, counts, process_set)

    @tf.RegisterGradient("RondeGroupedAllgather")
    def _grouped_allgather(op, *grads):
        process_set = process_set_by_id(op.get_attr("process_set_id"))
        summed = mpi_ops._grouped_raw(_filled(grads, op.outputs), None, nops.Sum, 1.0, 1.0,
                                      process_set)
        counts = mpi_ops.grouped_allgather([_rows_of(x) for x in op.inputs],
                                           process_set=process_set)
        return [_my_rows(s, x, c, process_set) for s, x, c in zip(summed, op.inputs, counts)]

    @tf.RegisterGradient("RondeBroadcast")
    def _broadcast(op, grad):
        # The summed gradient on the root, zeros elsewhere.
        process_set = process_set_by_id(op.get_attr("process_set_id"))
        summed = mpi_ops._allreduce_raw(grad, None, nops.Sum, 1.0, 1.0, process_set)
        return summed if process_set.rank() == op.get_attr("root") else summed * 0

    @tf.RegisterGradient("RondeAlltoall")
    def _alltoall(op, grad, unused_received_grad):
        # Sent back along the splits received.
        process_set = process_set_by_id(op.get_attr("process_set_id"))
        back, _ = mpi_ops._alltoall_raw(grad, op.outputs[1], None, process_set)
        return tf.reshape(back, tf.shape(op.inputs[0])), None

    @tf.RegisterGradient("RondeReducescatter")
    def _reducescatter(op, grad):
        # The allgather of the gradient, scaled as the forward scaled (1/size for Average).
        reduce_op, pre, post, process_set = _attrs(op)
        scale = _scatter_scale(reduce_op, pre, post, process_set, grad.dtype)
        return mpi_ops._allgather_raw(grad, None, process_set) * scale

    @tf.RegisterGradient("RondeGroupedReducescatter")
    def _grouped_reducescatter(op, *grads):
        reduce_op, pre, post, process_set = _attrs(op)
        gathered = mpi_ops.grouped_allgather(_filled(grads, op.outputs), process_set=process_set)
        return [g * _scatter_scale(reduce_op, pre, post, process_set, g.dtype) for g in gathered]

    tf.no_gradient("RondeJoin")
    tf.no_gradient("RondeBarrier")
