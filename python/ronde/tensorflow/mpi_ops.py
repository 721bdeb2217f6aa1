"""Horovod's TensorFlow collectives on ronde's runtime, eager and inside tf.function.

Two mechanisms (see docs/frontends.md), one API:

- compiled kernels (frontends/tensorflow, loaded by compiled_ops where this ronde was built
  against the running TensorFlow): each collective is an asynchronous TensorFlow op that
  submits its request to the runtime from C++ and completes when the runtime calls back, so
  no TensorFlow thread blocks and no Python runs per op;
- otherwise a `tf.numpy_function` (TF's public, versioned Python API) whose body hands the
  runtime the host buffer of the tensor as a named request of ronde._core and waits for it
  with the GIL released; in eager mode the same body runs directly on `tensor.numpy()`.
  `_allreduce_start` / `_finish` split an allreduce there into a submitting op that returns a
  handle at once and a waiting op: DistributedGradientTape creates every submitting op before
  any waiting one, so that no inter-op thread blocks while another rank still waits for this
  rank to submit.

Gradients follow Horovod's formulas on both: registered with TensorFlow for the compiled ops
(compiled_gradients), `tf.custom_gradient`s around the numpy path's.
"""

import itertools
import sys

import numpy as np
import tensorflow as tf

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.tensorflow import compiled_ops
from ronde.tensorflow.compression import Compression

Average = nops.Average
Sum = nops.Sum
Adasum = nops.Adasum
Min = nops.Min
Max = nops.Max
Product = nops.Product

HorovodInternalError = _core.RondeError
RondeError = _core.RondeError
MismatchError = _core.MismatchError

_SUPPORTED = (tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
              tf.float32, tf.float64, tf.bool)

# The compiled kernels' op functions (compiled_ops.library()), or None: the numpy path. Their
# ops carry registered gradients (compiled_gradients); the numpy path's raw collectives are
# wrapped in tf.custom_gradient below instead.
_ops = compiled_ops.library()
_scale = compiled_ops.scale_text

# handle number -> Pending, for the split (submit, wait) form of a request.
_pending = {}
_next_handle = itertools.count(1)


def _forget_handles():
    _pending.clear()


def _check(tensor, what):
    nops.check_initialized(what)
    if tensor.dtype not in _SUPPORTED:
        raise ValueError("%s: ronde does not support tensors of dtype %s" % (what, tensor.dtype.name))


def _convert(value):
    # A variable is read once here, so the request sees one consistent value.
    return tf.convert_to_tensor(value)


def _call(body, inputs, out_types, what):
    """Runs `body(*numpy inputs)` as a stateful graph op, or directly when eager. Returns a
    list of tensors of `out_types`."""
    if tf.executing_eagerly():
        results = body(*[t.numpy() for t in inputs])
        if not isinstance(results, (list, tuple)):
            results = [results]
        return [tf.convert_to_tensor(r, dtype=d) for r, d in zip(results, out_types)]
    return tf.numpy_function(body, list(inputs), list(out_types), stateful=True,
                             name="ronde_" + what)


def _compiled(op, *inputs, **attrs):
    """Runs compiled op `op`; eagerly, a ronde failure is raised as ronde's exception class
    (in a graph it stays the tf.errors.OpError that the function call raises)."""
    if not tf.executing_eagerly():
        return op(*inputs, **attrs)
    try:
        return op(*inputs, **attrs)
    except tf.errors.OpError as error:
        compiled_ops.raise_as_ronde_error(error)


def _set_id(process_set, what):
    set_id = process_set.process_set_id
    if set_id is None:
        raise ValueError("%s: %r is not registered (never added, or removed)"
                         % (what, process_set))
    return set_id


def _op_code(op):
    return int(nops._CORE_OPS[op])


def _leading_unknown(shape):
    if shape.rank is None:
        return tf.TensorShape(None)
    if shape.rank == 0:
        return tf.TensorShape([None])
    return tf.TensorShape([None]).concatenate(shape[1:])


# --- allreduce -------------------------------------------------------------------------------

def _allreduce_raw(tensor, name, op, prescale_factor, postscale_factor, process_set):
    _check(tensor, "allreduce")
    full_name = nops.request_name("allreduce", name, process_set)
    if _ops is not None:
        return _compiled(_ops.ronde_allreduce, tensor, tensor_name=full_name,
                         process_set_id=_set_id(process_set, "allreduce"), reduce_op=_op_code(op),
                         prescale_factor=_scale(prescale_factor),
                         postscale_factor=_scale(postscale_factor))

    def body(array):
        return nops.allreduce(array, full_name, op, prescale_factor, postscale_factor,
                              process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "allreduce")
    out.set_shape(tensor.shape)
    return out


def _allreduce_differentiable(tensor, name, op, prescale_factor, postscale_factor, process_set):
    if _ops is not None:  # the op's registered gradient
        return _allreduce_raw(tensor, name, op, prescale_factor, postscale_factor, process_set)

    @tf.custom_gradient
    def reduce(x):
        def grad(dy):
            # Horovod: the gradient of an allreduce is the allreduce of the gradient.
            return _allreduce_raw(dy, None, op, prescale_factor, postscale_factor, process_set)
        return _allreduce_raw(x, name, op, prescale_factor, postscale_factor, process_set), grad
    if tensor.dtype.is_floating:
        return reduce(tensor)
    return _allreduce_raw(tensor, name, op, prescale_factor, postscale_factor, process_set)


def _sparse_allreduce(slices, name, op, process_set):
    """Horovod's IndexedSlices allreduce: allgather the values and the indices."""
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of IndexedSlices supports Sum and Average only")
    values = allgather(slices.values, name=None if name is None else name + ".values",
                       process_set=process_set)
    indices = allgather(slices.indices, name=None if name is None else name + ".indices",
                        process_set=process_set)
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's `hvd.allreduce`: reduces `tensor` over the ranks of `process_set`.

    An `IndexedSlices` is allgathered (values and indices; Average divides the values).
    `device_dense`/`device_sparse`/`ignore_name_scope` are accepted and ignored (ronde
    reduces on the host). Differentiable: the gradient is the allreduce of the gradient.
    """
    op = nops.check_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, name, op, process_set)
    tensor = _convert(tensor)
    compressed, context = compression.compress(tensor)
    reduced = _allreduce_differentiable(compressed, name, op, prescale_factor, postscale_factor,
                                        process_set)
    return compression.decompress(reduced, context)


def _allreduce_start(tensor, name, op, prescale_factor, postscale_factor, process_set):
    """Submits an allreduce and returns an int64 handle tensor at once (see _finish)."""
    _check(tensor, "allreduce")
    full_name = nops.request_name("allreduce", name, process_set)

    def body(array):
        handle = next(_next_handle)
        _pending[handle] = nops.allreduce(array, full_name, op, prescale_factor,
                                          postscale_factor, process_set)
        return np.int64(handle)
    return _call(body, [tensor], [tf.int64], "allreduce_start")[0]


def _finish(handle, dtype, shape):
    """Waits for the request behind `handle` and returns its result."""
    def body(number):
        pending = _pending.pop(int(number), None)
        if pending is None:
            raise ValueError("ronde: unknown or already finished handle %d" % int(number))
        return pending.wait()
    out, = _call(body, [handle], [dtype], "wait")
    out.set_shape(shape)
    return out


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, name=None):
    """Horovod's `hvd.grouped_allreduce`: one negotiated, fused group; differentiable."""
    op = nops.check_op(op, average)
    tensors = [_convert(t) for t in tensors]
    if not tensors:
        return []
    compressed = [compression.compress(t) for t in tensors]
    reduced = _grouped_differentiable([c for c, _ in compressed], name, op, prescale_factor,
                                      postscale_factor, process_set)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def _grouped_raw(tensors, name, op, prescale_factor, postscale_factor, process_set):
    for t in tensors:
        _check(t, "grouped_allreduce")
    base = nops.request_name("grouped_allreduce", name, process_set)
    if _ops is not None:
        return list(_compiled(_ops.ronde_grouped_allreduce, tensors, tensor_name=base,
                              process_set_id=_set_id(process_set, "grouped_allreduce"),
                              reduce_op=_op_code(op), prescale_factor=_scale(prescale_factor),
                              postscale_factor=_scale(postscale_factor)))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]

    def body(*arrays):
        return nops.grouped_allreduce(arrays, names, op, prescale_factor, postscale_factor,
                                      process_set).wait()
    outs = _call(body, tensors, [t.dtype for t in tensors], "grouped_allreduce")
    for out, t in zip(outs, tensors):
        out.set_shape(t.shape)
    return outs


def _grouped_differentiable(tensors, name, op, prescale_factor, postscale_factor, process_set):
    if _ops is not None or not all(t.dtype.is_floating for t in tensors):
        return _grouped_raw(tensors, name, op, prescale_factor, postscale_factor, process_set)

    @tf.custom_gradient
    def reduce(*xs):
        def grad(*dys):
            return _grouped_raw(list(dys), None, op, prescale_factor, postscale_factor,
                                process_set)
        return _grouped_raw(list(xs), name, op, prescale_factor, postscale_factor,
                            process_set), grad
    return list(reduce(*tensors))


# --- allgather -------------------------------------------------------------------------------

def _allgather_raw(tensor, name, process_set):
    _check(tensor, "allgather")
    full_name = nops.request_name("allgather", name, process_set)
    if _ops is not None:
        return _compiled(_ops.ronde_allgather, tensor, tensor_name=full_name,
                         process_set_id=_set_id(process_set, "allgather"))

    def body(array):
        return nops.allgather(array, full_name, process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "allgather")
    out.set_shape(_leading_unknown(tensor.shape))
    return out


def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's `hvd.allgather`: concatenates every rank's tensor along the first dimension
    (which may differ by rank). Differentiable: the gradient is this rank's rows of the
    summed gradient (Horovod's TensorFlow rule)."""
    tensor = _convert(tensor)
    if _ops is not None or not tensor.dtype.is_floating:
        return _allgather_raw(tensor, name, process_set)

    @tf.custom_gradient
    def gather(x):
        def grad(dy):
            summed = _allreduce_raw(dy, None, Sum, 1.0, 1.0, process_set)
            rows = tf.reshape(tf.shape(x, out_type=tf.int64)[0] if x.shape.rank else
                              tf.constant(1, tf.int64), [1])
            counts = _allgather_raw(rows, None, process_set)
            me = process_set.rank()
            offset = tf.reduce_sum(counts[:me])
            piece = summed[offset:offset + rows[0]]
            return tf.reshape(piece, tf.shape(x))
        return _allgather_raw(x, name, process_set), grad
    return gather(tensor)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Horovod's `hvd.grouped_allgather`: one negotiated group of allgathers."""
    tensors = [_convert(t) for t in tensors]
    for t in tensors:
        _check(t, "grouped_allgather")
    base = nops.request_name("grouped_allgather", name, process_set)
    if _ops is not None:
        if not tensors:
            return []
        return list(_compiled(_ops.ronde_grouped_allgather, tensors, tensor_name=base,
                              process_set_id=_set_id(process_set, "grouped_allgather")))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]

    def body(*arrays):
        return nops.grouped_allgather(arrays, names, process_set).wait()
    outs = _call(body, tensors, [t.dtype for t in tensors], "grouped_allgather")
    for out, t in zip(outs, tensors):
        out.set_shape(_leading_unknown(t.shape))
    return outs


# --- broadcast -------------------------------------------------------------------------------

def _broadcast_raw(tensor, root_rank, name, process_set):
    _check(tensor, "broadcast")
    root = nops.root_index(root_rank, process_set)  # outside the set: fails before submitting
    full_name = nops.request_name("broadcast", name, process_set)
    if _ops is not None:
        return _compiled(_ops.ronde_broadcast, tensor, tensor_name=full_name,
                         process_set_id=_set_id(process_set, "broadcast"), root=root)

    def body(array):
        return nops.broadcast(array, root_rank, full_name, process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "broadcast")
    out.set_shape(tensor.shape)
    return out


def broadcast(tensor, root_rank, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Horovod's `hvd.broadcast`: root_rank's tensor on every rank (root_rank is a global rank,
    also in a process set). Differentiable: the summed gradient on the root, zero elsewhere."""
    tensor = _convert(tensor)
    if _ops is not None or not tensor.dtype.is_floating:
        return _broadcast_raw(tensor, root_rank, name, process_set)

    @tf.custom_gradient
    def bcast(x):
        def grad(dy):
            summed = _allreduce_raw(dy, None, Sum, 1.0, 1.0, process_set)
            return summed if _core.rank() == root_rank else summed * 0
        return _broadcast_raw(x, root_rank, name, process_set), grad
    return bcast(tensor)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's `hvd.broadcast_`: assigns root_rank's values to `variables` in place."""
    from ronde.tensorflow.functions import broadcast_variables
    return broadcast_variables(variables, root_rank, process_set=process_set)


# --- alltoall --------------------------------------------------------------------------------

def _alltoall_raw(tensor, splits, name, process_set):
    _check(tensor, "alltoall")
    full_name = nops.request_name("alltoall", name, process_set)
    if splits is not None:
        splits = _convert(splits)
        if not splits.dtype.is_integer:
            raise ValueError("alltoall: splits must have an integer dtype, not %s"
                             % splits.dtype.name)
        inputs = [tensor, splits]
    else:
        inputs = [tensor]
    if _ops is not None:
        split_values = (tf.cast(tf.reshape(inputs[1], [-1]), tf.int32) if len(inputs) > 1
                        else tf.zeros([0], tf.int32))
        out, received = _compiled(_ops.ronde_alltoall, tensor, split_values,
                                  tensor_name=full_name,
                                  process_set_id=_set_id(process_set, "alltoall"),
                                  process_set_size=process_set.size())
        if not tf.executing_eagerly():
            out.set_shape(_leading_unknown(tensor.shape))
            received.set_shape([process_set.size()] if process_set.included() else [None])
        return out, received

    def body(array, split_values=None):
        return list(nops.alltoall(array, split_values, full_name, process_set).wait())
    out, received = _call(body, inputs, [tensor.dtype, tf.int32], "alltoall")
    out.set_shape(_leading_unknown(tensor.shape))
    received.set_shape([process_set.size()] if process_set.included() else [None])
    return out, received


def alltoall(tensor, splits=None, name=None, process_set=global_process_set,
             ignore_name_scope=False):
    """Horovod's `hvd.alltoall`: sends splits[j] first-dimension rows to rank j and returns
    (gathered tensor, rows received from each rank). Without `splits` the first dimension is
    divided evenly. Differentiable: the gradient is the alltoall back along received splits."""
    tensor = _convert(tensor)
    if _ops is not None:
        out, received = _alltoall_raw(tensor, splits, name, process_set)
        return out, tf.stop_gradient(received)
    if not tensor.dtype.is_floating:
        return _alltoall_raw(tensor, splits, name, process_set)

    @tf.custom_gradient
    def exchange(x):
        out, received = _alltoall_raw(x, splits, name, process_set)

        def grad(dy, unused_received_grad=None):
            back, _ = _alltoall_raw(dy, received, None, process_set)
            return tf.reshape(back, tf.shape(x))
        return (out, received), grad
    out, received = exchange(tensor)
    return out, tf.stop_gradient(received)


# --- reducescatter ---------------------------------------------------------------------------

def _reducescatter_raw(tensor, name, op, prescale_factor, postscale_factor, process_set):
    _check(tensor, "reducescatter")
    full_name = nops.request_name("reducescatter", name, process_set)
    if _ops is not None:
        return _compiled(_ops.ronde_reducescatter, tensor, tensor_name=full_name,
                         process_set_id=_set_id(process_set, "reducescatter"),
                         reduce_op=_op_code(op), prescale_factor=_scale(prescale_factor),
                         postscale_factor=_scale(postscale_factor))

    def body(array):
        return nops.reducescatter(array, full_name, op, prescale_factor, postscale_factor,
                                  process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "reducescatter")
    out.set_shape(_leading_unknown(tensor.shape))
    return out


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Horovod's `hvd.reducescatter`: this rank's share of the first dimension of the reduction
    (the first ``rows % size`` ranks get one extra row). Differentiable for Sum and Average:
    the gradient is the allgather of the gradient, scaled as the forward scaled."""
    op = nops.check_op(op)
    tensor = _convert(tensor)
    compressed, context = compression.compress(tensor)
    if _ops is not None or not compressed.dtype.is_floating or op not in (Sum, Average):
        out = _reducescatter_raw(compressed, name, op, prescale_factor, postscale_factor,
                                 process_set)
        return compression.decompress(out, context)

    @tf.custom_gradient
    def scatter(x):
        def grad(dy):
            scale = prescale_factor * postscale_factor
            if op == Average:
                scale /= process_set.size()
            return _allgather_raw(dy, None, process_set) * tf.cast(scale, dy.dtype)
        return _reducescatter_raw(x, name, op, prescale_factor, postscale_factor,
                                  process_set), grad
    return compression.decompress(scatter(compressed), context)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """Horovod's `hvd.grouped_reducescatter`: one negotiated group of reducescatters."""
    op = nops.check_op(op)
    tensors = [_convert(t) for t in tensors]
    compressed = [compression.compress(t) for t in tensors]
    inputs = [c for c, _ in compressed]
    for t in inputs:
        _check(t, "grouped_reducescatter")
    base = nops.request_name("grouped_reducescatter", name, process_set)
    if _ops is not None:
        outs = [] if not inputs else list(_compiled(
            _ops.ronde_grouped_reducescatter, inputs, tensor_name=base,
            process_set_id=_set_id(process_set, "grouped_reducescatter"), reduce_op=_op_code(op),
            prescale_factor=_scale(prescale_factor), postscale_factor=_scale(postscale_factor)))
        return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]
    names = ["%s.%d" % (base, i) for i in range(len(inputs))]

    def body(*arrays):
        return nops.grouped_reducescatter(arrays, names, op, prescale_factor, postscale_factor,
                                          process_set).wait()
    outs = _call(body, inputs, [t.dtype for t in inputs], "grouped_reducescatter")
    for out, t in zip(outs, inputs):
        out.set_shape(_leading_unknown(t.shape))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]


# --- join and barrier ------------------------------------------------------------------------

def join():
    """Horovod's `hvd.join`: marks this rank done (it adds zeros to the others' allreduces
    until every rank joined); returns the rank that joined last (in a graph, as a tensor)."""
    nops.check_initialized("join")
    if _ops is None:
        return nops.join().wait()
    last = _compiled(_ops.ronde_join, tensor_name=nops.request_name("join", None))
    return int(last) if tf.executing_eagerly() else last


def barrier(process_set=global_process_set):
    """Horovod's `hvd.barrier`: blocks until every rank of the set has reached it (in a
    graph, when the op runs)."""
    nops.check_initialized("barrier")
    if _ops is None:
        nops.barrier(process_set).wait()
        return
    _compiled(_ops.ronde_barrier, tensor_name=nops.request_name("barrier", None, process_set),
              process_set_id=_set_id(process_set, "barrier"))


if _ops is not None:
    from ronde.tensorflow import compiled_gradients
    compiled_gradients.register(sys.modules[__name__])
