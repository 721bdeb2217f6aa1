"""Horovod's `horovod.tensorflow.mpi_ops` on ronde's runtime: the collective ops, the job-fact
ops (`size_op`, `rank_op`, ...) and the job's facts, eagerly, inside tf.function and in TF1
graphs (tf.compat.v1 sessions).

Two mechanisms, one API (docs/frontends.md):
- compiled kernels (frontends/tensorflow, loaded by compiled_ops where this ronde was built
  against the running TensorFlow): each collective is an asynchronous, stateful TensorFlow op
  that submits its request from C++ and completes when the runtime calls back;
- otherwise the numpy bridge (numpy_path): stateful tf.numpy_functions over ronde._core.

Names: every request has a name that all ranks must agree on. A `name` given by the caller
becomes `<kind>.<name>`, under the graph's name scope unless `ignore_name_scope` (as Horovod
names a graph op by its node name). An unnamed request made eagerly is numbered per kind and
process set in the order this rank makes them; an unnamed op in a graph (a tf.function's or
a TF1 graph) takes a name unique in that graph, in the order ops are added to it (as Horovod's
take their node's name). Ranks that build their collectives in the same order agree, and a
graph built on one rank alone leaves the eager numbering in step with the other ranks.
"""

import sys

import tensorflow as tf

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.basics import (cross_rank, cross_size, init, is_homogeneous,  # noqa: F401
                                 is_initialized, local_rank, local_size, rank, shutdown, size,
                                 start_timeline, stop_timeline)
from ronde.common.build_info import (ccl_built, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                     gloo_enabled, mpi_built, mpi_enabled,
                                     mpi_threads_supported, nccl_built, rocm_built)
from ronde.common.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                       global_process_set, remove_process_set)
from ronde.tensorflow import compiled_ops, errors, gradients, numpy_path
from ronde.tensorflow.util import (check_num_rank_power_of_2,  # noqa: F401
                                   handle_average_backwards_compatibility)

Average = nops.Average
Sum = nops.Sum
Adasum = nops.Adasum
Min = nops.Min
Max = nops.Max
Product = nops.Product

HorovodInternalError = _core.HorovodInternalError
RondeError = _core.RondeError
MismatchError = errors.MismatchError

_SUPPORTED = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
              tf.bfloat16, tf.float32, tf.float64, tf.bool)

# The compiled kernels' op functions, or None: the numpy bridge.
_ops = compiled_ops.library()
_scale = compiled_ops.scale_text


def _check(tensor, what):
    nops.check_initialized(what)
    if tensor.dtype not in _SUPPORTED:
        raise errors.invalid_argument("%s: ronde does not support tensors of dtype %s"
                                          % (what, tensor.dtype.name))


def _convert(value):
    # A variable is read once here, so the request sees one consistent value.
    return tf.convert_to_tensor(value)


def _name(kind, name, process_set, ignore_name_scope=False):
    """The request's full name (see the module's docstring)."""
    if not tf.executing_eagerly():
        graph = tf.compat.v1.get_default_graph()
        if name is None:
            # Unique in this graph and under its name scope, and independent of what other
            # graphs this rank built (and of the eager count).
            name = graph.unique_name("noname_%s" % kind)
            if process_set.process_set_id:
                name = "%s.set%d" % (name, process_set.process_set_id)
        elif not ignore_name_scope and graph.get_name_scope():
            name = "%s/%s" % (graph.get_name_scope(), name)
    return nops.request_name(kind, name, process_set)


def _set_id(process_set, what):
    set_id = process_set.process_set_id
    if set_id is None:
        raise errors.invalid_argument("%s: %r is not registered (never added, or removed)"
                                          % (what, process_set))
    return set_id


def _op_code(op):
    return int(nops._CORE_OPS[op])


def _differentiable(dtypes):
    """Whether a numpy-bridge collective over tensors of `dtypes` needs a custom gradient."""
    return _ops is None and all(d.is_floating for d in dtypes)


# --- the raw collectives: no compression, no IndexedSlices; gradients registered ----------

def allreduce_raw(tensor, name, op, prescale, postscale, process_set,
                  ignore_name_scope=False):
    _check(tensor, "allreduce")
    full_name = _name("allreduce", name, process_set, ignore_name_scope)
    if _ops is not None:
        return compiled_ops.run(_ops.ronde_allreduce, tensor, tensor_name=full_name,
                                process_set_id=_set_id(process_set, "allreduce"),
                                reduce_op=_op_code(op), prescale_factor=_scale(prescale),
                                postscale_factor=_scale(postscale))
    forward = lambda x: numpy_path.allreduce(x, full_name, op, prescale, postscale,  # noqa: E731
                                             process_set)
    if not _differentiable([tensor.dtype]):
        return forward(tensor)
    return numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.allreduce(
        _this, dys[0], op, prescale, postscale, process_set))(tensor)


def grouped_allreduce_raw(tensors, name, op, prescale, postscale, process_set,
                          ignore_name_scope=False):
    if not tensors:
        return []
    for t in tensors:
        _check(t, "grouped_allreduce")
    base = _name("grouped_allreduce", name, process_set, ignore_name_scope)
    if _ops is not None:
        return list(compiled_ops.run(
            _ops.ronde_grouped_allreduce, tensors, tensor_name=base,
            process_set_id=_set_id(process_set, "grouped_allreduce"), reduce_op=_op_code(op),
            prescale_factor=_scale(prescale), postscale_factor=_scale(postscale)))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    forward = lambda *xs: numpy_path.grouped_allreduce(  # noqa: E731
        list(xs), names, op, prescale, postscale, process_set)
    if not _differentiable([t.dtype for t in tensors]):
        return forward(*tensors)
    return list(numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.grouped_allreduce(
        _this, dys, ys, op, prescale, postscale, process_set))(*tensors))


def allgather_raw(tensor, name, process_set, ignore_name_scope=False):
    _check(tensor, "allgather")
    full_name = _name("allgather", name, process_set, ignore_name_scope)
    if _ops is not None:
        return compiled_ops.run(_ops.ronde_allgather, tensor, tensor_name=full_name,
                                process_set_id=_set_id(process_set, "allgather"))
    forward = lambda x: numpy_path.allgather(x, full_name, process_set)  # noqa: E731
    if not _differentiable([tensor.dtype]):
        return forward(tensor)
    return numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.allgather(
        _this, dys[0], xs[0], process_set, ys[0]))(tensor)


def grouped_allgather_raw(tensors, name, process_set, ignore_name_scope=False):
    if not tensors:
        return []
    for t in tensors:
        _check(t, "grouped_allgather")
    base = _name("grouped_allgather", name, process_set, ignore_name_scope)
    if _ops is not None:
        return list(compiled_ops.run(_ops.ronde_grouped_allgather, tensors, tensor_name=base,
                                     process_set_id=_set_id(process_set, "grouped_allgather")))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    forward = lambda *xs: numpy_path.grouped_allgather(list(xs), names,  # noqa: E731
                                                       process_set)
    if not _differentiable([t.dtype for t in tensors]):
        return forward(*tensors)
    return list(numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.grouped_allgather(
        _this, dys, ys, xs, process_set))(*tensors))


def broadcast_raw(tensor, root_rank, name, process_set, ignore_name_scope=False):
    _check(tensor, "broadcast")
    try:
        root = nops.root_index(root_rank, process_set)  # outside the set: before submitting
    except ValueError as error:
        raise errors.invalid_argument(str(error)) from None
    full_name = _name("broadcast", name, process_set, ignore_name_scope)
    if _ops is not None:
        return compiled_ops.run(_ops.ronde_broadcast, tensor, tensor_name=full_name,
                                process_set_id=_set_id(process_set, "broadcast"), root=root)
    forward = lambda x: numpy_path.broadcast(x, root_rank, full_name, process_set)  # noqa: E731
    if not _differentiable([tensor.dtype]):
        return forward(tensor)
    return numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.broadcast(
        _this, dys[0], root, process_set))(tensor)


def alltoall_raw(tensor, splits, name, process_set, ignore_name_scope=False):
    """(output, received splits) of an alltoall; `splits` None divides the rows evenly."""
    _check(tensor, "alltoall")
    full_name = _name("alltoall", name, process_set, ignore_name_scope)
    if splits is not None:
        splits = _convert(splits)
        if not splits.dtype.is_integer:
            raise errors.invalid_argument("alltoall: splits must have an integer dtype, "
                                              "not %s" % splits.dtype.name)
    if _ops is not None:
        split_values = (tf.cast(tf.reshape(splits, [-1]), tf.int32) if splits is not None
                        else tf.zeros([0], tf.int32))
        set_id = _set_id(process_set, "alltoall")
        # 0: the kernel counts the set's members when it runs (a re-formed elastic world).
        members = 0 if set_id == 0 else process_set.size()
        out, received = compiled_ops.run(_ops.ronde_alltoall, tensor, split_values,
                                         tensor_name=full_name, process_set_id=set_id,
                                         process_set_size=members)
        if not tf.executing_eagerly():
            out.set_shape(numpy_path._leading_unknown(tensor.shape))
        return out, received
    forward = lambda x: numpy_path.alltoall(x, splits, full_name, process_set)  # noqa: E731
    if not _differentiable([tensor.dtype]):
        return forward(tensor)
    return numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.alltoall(
        _this, dys[0], ys[1], xs[0], process_set))(tensor)


def reducescatter_raw(tensor, name, op, prescale, postscale, process_set,
                      ignore_name_scope=False):
    _check(tensor, "reducescatter")
    full_name = _name("reducescatter", name, process_set, ignore_name_scope)
    if _ops is not None:
        return compiled_ops.run(_ops.ronde_reducescatter, tensor, tensor_name=full_name,
                                process_set_id=_set_id(process_set, "reducescatter"),
                                reduce_op=_op_code(op), prescale_factor=_scale(prescale),
                                postscale_factor=_scale(postscale))
    forward = lambda x: numpy_path.reducescatter(x, full_name, op, prescale,  # noqa: E731
                                                 postscale, process_set)
    if not _differentiable([tensor.dtype]):
        return forward(tensor)
    return numpy_path.differentiable(forward, lambda dys, xs, ys: gradients.reducescatter(
        _this, dys[0], op, prescale, postscale, process_set))(tensor)


def grouped_reducescatter_raw(tensors, name, op, prescale, postscale, process_set,
                              ignore_name_scope=False):
    if not tensors:
        return []
    for t in tensors:
        _check(t, "grouped_reducescatter")
    base = _name("grouped_reducescatter", name, process_set, ignore_name_scope)
    if _ops is not None:
        return list(compiled_ops.run(
            _ops.ronde_grouped_reducescatter, tensors, tensor_name=base,
            process_set_id=_set_id(process_set, "grouped_reducescatter"), reduce_op=_op_code(op),
            prescale_factor=_scale(prescale), postscale_factor=_scale(postscale)))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    forward = lambda *xs: numpy_path.grouped_reducescatter(  # noqa: E731
        list(xs), names, op, prescale, postscale, process_set)
    if not _differentiable([t.dtype for t in tensors]):
        return forward(*tensors)
    return list(numpy_path.differentiable(
        forward, lambda dys, xs, ys: gradients.grouped_reducescatter(
            _this, dys, ys, op, prescale, postscale, process_set))(*tensors))


# --- Horovod's mpi_ops functions --------------------------------------------------------------

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """Horovod's `mpi_ops._allreduce`: the op alone (no compression, no IndexedSlices)."""
    return allreduce_raw(_convert(tensor), name, op, prescale_factor, postscale_factor,
                         process_set, ignore_name_scope)


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    return grouped_allreduce_raw([_convert(t) for t in tensors], name, op, prescale_factor,
                                 postscale_factor, process_set, ignore_name_scope)


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    return reducescatter_raw(_convert(tensor), name, op, prescale_factor, postscale_factor,
                             process_set, ignore_name_scope)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    return grouped_reducescatter_raw([_convert(t) for t in tensors], name, op, prescale_factor,
                                     postscale_factor, process_set, ignore_name_scope)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Horovod's `hvd.allgather`: every rank's tensor concatenated along the first dimension
    (which may differ by rank; a scalar counts as one row). Differentiable: this rank's rows
    of the average over ranks of the output's gradient."""
    return allgather_raw(_convert(tensor), name, process_set, ignore_name_scope)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Horovod's `hvd.grouped_allgather`: one negotiated group of allgathers."""
    return grouped_allgather_raw([_convert(t) for t in tensors], name, process_set,
                                 ignore_name_scope)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Horovod's `hvd.broadcast`: root_rank's tensor on every rank of the set (root_rank is a
    global rank, also in a process set). Differentiable: the average of the gradient on the
    root, zeros elsewhere."""
    return broadcast_raw(_convert(tensor), root_rank, name, process_set, ignore_name_scope)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's `hvd.broadcast_`: assigns root_rank's values to `variables` in place and
    returns their new values."""
    from ronde.tensorflow.functions import assign_broadcast
    return assign_broadcast(list(variables), root_rank, name, process_set)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Horovod's `hvd.alltoall`: sends splits[j] first-dimension rows to rank j of the set and
    returns the rows every rank sent this one, concatenated in rank order. Returns
    `(output, received_splits)` when `splits` is given and `output` alone when it is not (the
    first dimension is then divided evenly), as Horovod does. Differentiable: the gradient
    goes back along the splits received."""
    out, received = alltoall_raw(_convert(tensor), splits, name, process_set, ignore_name_scope)
    if splits is None:
        return out
    return out, tf.stop_gradient(received)


def join():
    """Horovod's `hvd.join`: marks this rank done; it contributes zeros to the other ranks'
    allreduces until every rank joined. Returns the rank that joined last (an int32 scalar
    tensor)."""
    nops.check_initialized("join")
    if _ops is None:
        return numpy_path.join()
    last = compiled_ops.run(_ops.ronde_join, ordered=True,
                            tensor_name=_name("join", None, global_process_set))
    if tf.executing_eagerly():
        # The join completed on every rank (an eager op has run when it returns): unnamed
        # requests number in step again, whatever calls a joined rank skipped. (In a graph,
        # unnamed requests take the graph's unique names, which no count moves.)
        nops.joined_all()
    return last


def barrier(process_set=global_process_set, name=None):
    """Blocks until every rank of the set has reached it (in a graph, when the returned op
    runs). ronde's addition: Horovod 0.28.1's TensorFlow module has no barrier."""
    nops.check_initialized("barrier")
    if _ops is None:
        return numpy_path.barrier(process_set)
    return compiled_ops.run(_ops.ronde_barrier, ordered=True,
                            tensor_name=_name("barrier", None, process_set),
                            process_set_id=_set_id(process_set, "barrier"), name=name)


# --- the job's facts, read when the op runs ------------------------------------------------

def _fact(compiled, numpy_read, what, name, **attrs):
    if _ops is None:
        return numpy_path.job_fact(numpy_read, what)
    return compiled_ops.run(compiled, name=name, **attrs)


def size_op(process_set_id=0, name=None):
    """Horovod's `hvd.size_op`: the number of ranks in the process set, read when the op runs
    (a graph built before an elastic world re-formed sees the new world)."""
    return _fact(_ops and _ops.ronde_size,
                 lambda: _set_of(process_set_id).size(), "size", name,
                 process_set_id=process_set_id)


def process_set_included_op(process_set_id=0, name=None):
    """Horovod's `hvd.process_set_included_op`: 1 if this rank is in the process set, else 0.
    An unknown set or no runtime raise InvalidArgumentError (Horovod returns negative codes)."""
    return _fact(_ops and _ops.ronde_process_set_included,
                 lambda: int(_set_of(process_set_id).included()), "process_set_included", name,
                 process_set_id=process_set_id)


def local_size_op(name=None):
    """Horovod's `hvd.local_size_op`: the number of ranks on this host, when the op runs."""
    return _fact(_ops and _ops.ronde_local_size, _core.local_size, "local_size", name)


def rank_op(name=None):
    """Horovod's `hvd.rank_op`: this process's rank, when the op runs."""
    return _fact(_ops and _ops.ronde_rank, _core.rank, "rank", name)


def local_rank_op(name=None):
    """Horovod's `hvd.local_rank_op`: this process's rank on its host, when the op runs."""
    return _fact(_ops and _ops.ronde_local_rank, _core.local_rank, "local_rank", name)


def _set_of(process_set_id):
    from ronde.common.process_sets import process_set_by_id
    try:
        return process_set_by_id(process_set_id)
    except ValueError as error:
        raise errors.invalid_argument(str(error)) from None


_this = sys.modules[__name__]  # this module: the collectives the gradients call

if _ops is not None:
    gradients.register(_this)
