"""The gradients of ronde's TensorFlow collectives: Horovod 0.28.1's formulas, written once and
used by both mechanisms (registered with TensorFlow for the compiled ops by `register`, wrapped
in tf.custom_gradient on the numpy bridge). Every gradient is itself a collective that every
rank builds alike (unnamed, so numbered in order).

- allreduce: the allreduce of the gradient with the same op and scale factors;
- allgather: this rank's rows of the average over ranks of the output's gradient;
- broadcast: the average of the gradient on the root, zeros elsewhere;
- alltoall: the gradient sent back along the splits received;
- reducescatter: the allgather of the gradient, times the set's size for Sum, and times the
  scale factors. Horovod also returns that for Min, Max and Product, where it is not a
  gradient; ronde refuses them (NotImplementedError).
"""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common import reduce_ops


def _rows_of(x):
    """The number of rows x contributes to a gather, as a [1] int64 tensor (a scalar is one)."""
    if x.shape.rank == 0:
        return tf.constant([1], tf.int64)
    return tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1])


def _my_rows(gathered_grad, x, counts, process_set):
    """This rank's rows of a gathered gradient, shaped as its input `x`."""
    member = process_set.rank()
    offset = tf.reduce_sum(counts[:member])
    rows = _rows_of(x)[0]
    return tf.reshape(gathered_grad[offset:offset + rows], tf.shape(x))


def allreduce(collectives, grad, op, prescale, postscale, process_set):
    return collectives.allreduce_raw(grad, None, op, prescale, postscale, process_set)


def grouped_allreduce(collectives, grads, outputs, op, prescale, postscale, process_set):
    return collectives.grouped_allreduce_raw(_filled(grads, outputs), None, op, prescale,
                                             postscale, process_set)


def _in_order(first, make):
    """make() under a control dependency on `first`: the collectives of one gradient (and its
    forward op) run in one order on every rank. Where a collective blocks a TensorFlow thread
    (the numpy bridge's py_funcs), a session that runs two independent ones in different orders
    on two ranks would leave each waiting for the other. A no-op eagerly."""
    with tf.control_dependencies([t for t in first if t is not None]):
        return make()


def allgather(collectives, grad, x, process_set, output=None):
    averaged = _in_order([output], lambda: collectives.allreduce_raw(
        grad, None, nops.Average, 1.0, 1.0, process_set))
    counts = _in_order([averaged], lambda: collectives.allgather_raw(
        _rows_of(x), None, process_set))
    return _my_rows(averaged, x, counts, process_set)


def grouped_allgather(collectives, grads, outputs, inputs, process_set):
    # One allreduce per member, not a group: TensorFlow may hand a float32 zero gradient for
    # an output of another dtype, and a group's members share nothing but their names.
    averaged = []
    for g in _filled(grads, outputs):
        averaged.append(_in_order(list(outputs) + averaged[-1:], lambda g=g: (
            collectives.allreduce_raw(g, None, nops.Average, 1.0, 1.0, process_set))))
    counts = _in_order(averaged, lambda: collectives.grouped_allgather_raw(
        [_rows_of(x) for x in inputs], None, process_set))
    return [_my_rows(a, x, c, process_set) for a, x, c in zip(averaged, inputs, counts)]


def broadcast(collectives, grad, root_index, process_set):
    averaged = collectives.allreduce_raw(grad, None, nops.Average, 1.0, 1.0, process_set)
    if process_set.rank() == root_index:
        return averaged
    # Zeros that still depend on the allreduce, which every rank must join: TensorFlow would
    # prune an allreduce whose value nothing reads (zeros_like of a known shape is a constant).
    with tf.control_dependencies([averaged]):
        return tf.zeros_like(grad)


def alltoall(collectives, grad, received_splits, x, process_set):
    back, _ = collectives.alltoall_raw(grad, received_splits, None, process_set)
    return tf.reshape(back, tf.shape(x))


def _scatter_scale(op, prescale, postscale, process_set):
    if op not in (nops.Sum, nops.Average):
        raise NotImplementedError(
            "ronde: reducescatter has a gradient for Sum and Average only (Horovod returns the "
            "allgathered gradient for other ops too, which is not their gradient)")
    scale = prescale * postscale
    return scale * process_set.size() if op == nops.Sum else scale


def reducescatter(collectives, grad, op, prescale, postscale, process_set):
    scale = _scatter_scale(op, prescale, postscale, process_set)
    gathered = collectives.allgather_raw(grad, None, process_set)
    return gathered if scale == 1.0 else gathered * tf.cast(scale, gathered.dtype)


def grouped_reducescatter(collectives, grads, outputs, op, prescale, postscale, process_set):
    scale = _scatter_scale(op, prescale, postscale, process_set)
    gathered = []
    for g in _filled(grads, outputs):
        gathered.append(_in_order(gathered[-1:], lambda g=g: collectives.allgather_raw(
            g, None, process_set)))
    return [g if scale == 1.0 else g * tf.cast(scale, g.dtype) for g in gathered]


def _filled(grads, outputs):
    # Every rank must submit every member: an output nobody differentiates gets zeros.
    return [tf.zeros_like(o) if g is None else g for g, o in zip(grads, outputs)]


def register(collectives):
    """Registers the compiled ops' gradients; `collectives` is ronde.tensorflow.mpi_ops."""
    from ronde.common.process_sets import process_set_by_id

    def reduction(op):
        return (reduce_ops.op_of_code(op.get_attr("reduce_op")),
                float(op.get_attr("prescale_factor")), float(op.get_attr("postscale_factor")),
                process_set_by_id(op.get_attr("process_set_id")))

    def process_set_of(op):
        return process_set_by_id(op.get_attr("process_set_id"))

    @tf.RegisterGradient("RondeAllreduce")
    def _allreduce(op, grad):
        return allreduce(collectives, grad, *reduction(op))

    @tf.RegisterGradient("RondeGroupedAllreduce")
    def _grouped_allreduce(op, *grads):
        return grouped_allreduce(collectives, grads, op.outputs, *reduction(op))

    @tf.RegisterGradient("RondeAllgather")
    def _allgather(op, grad):
        return allgather(collectives, grad, op.inputs[0], process_set_of(op), op.outputs[0])

    @tf.RegisterGradient("RondeGroupedAllgather")
    def _grouped_allgather(op, *grads):
        return grouped_allgather(collectives, grads, op.outputs, op.inputs, process_set_of(op))

    @tf.RegisterGradient("RondeBroadcast")
    def _broadcast(op, grad):
        return broadcast(collectives, grad, op.get_attr("root"), process_set_of(op))

    @tf.RegisterGradient("RondeAlltoall")
    def _alltoall(op, grad, unused_received_grad):
        return alltoall(collectives, grad, op.outputs[1], op.inputs[0], process_set_of(op)), None

    @tf.RegisterGradient("RondeReducescatter")
    def _reducescatter(op, grad):
        return reducescatter(collectives, grad, *reduction(op))

    @tf.RegisterGradient("RondeGroupedReducescatter")
    def _grouped_reducescatter(op, *grads):
        return grouped_reducescatter(collectives, grads, op.outputs, *reduction(op))

    for name in ("RondeJoin", "RondeBarrier", "RondeSize", "RondeRank", "RondeLocalSize",
                 "RondeLocalRank", "RondeProcessSetIncluded"):
        tf.no_gradient(name)
