"""Collectives on MXNet NDArrays, with Horovod's horovod.mxnet names and semantics.

MXNet 1.9 offers no stable way to lend an NDArray's memory to another library from Python,
so each collective stages the array through a host numpy copy (asnumpy waits for MXNet's
engine) and writes the result back into an NDArray. CPU contexts only.
"""

import collections
import itertools

import mxnet as mx
import numpy as np

from ronde import _core
# Horovod's op numbers (re-exported), ronde's ReduceOp for each, ronde's dtype codes.
from ronde.common.reduce_ops import CORE_OPS as _CORE_OPS, DTYPE_CODES
from ronde.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401

_ALLREDUCE = _core.RequestKind.ALLREDUCE
_ALLGATHER = _core.RequestKind.ALLGATHER
_BROADCAST = _core.RequestKind.BROADCAST
_ALLTOALL = _core.RequestKind.ALLTOALL

# MXNet has no bfloat16 NDArray here: every other ronde dtype, by numpy dtype.
_DTYPES = {np.dtype(name): code for name, code in DTYPE_CODES.items() if name != "bfloat16"}

RondeError = _core.RondeError
HorovodInternalError = _core.HorovodInternalError
MismatchError = _core.MismatchError

_counters = collections.defaultdict(itertools.count)


def _reset_naming():
    _counters.clear()


def _name(kind, name):
    if name is not None:
        return "%s.%s" % (kind, name)
    return "%s.noname.%d" % (kind, next(_counters[kind]))


def _check_cpu(tensor):
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError("ronde.mxnet: expected an mxnet NDArray, got %s" % type(tensor).__name__)
    if tensor.context.device_type != "cpu":
        raise ValueError("ronde.mxnet supports NDArrays on the CPU only, not %s" % tensor.context)
    if tensor.stype != "default":
        raise ValueError("ronde.mxnet supports dense NDArrays only, not stype %r" % tensor.stype)


def _host(tensor):
    """A contiguous numpy copy of `tensor` (waits for the engine to finish writing it)."""
    _check_cpu(tensor)
    array = np.ascontiguousarray(tensor.asnumpy())
    if array.dtype not in _DTYPES:
        raise ValueError("ronde.mxnet does not support NDArrays of dtype %s" % array.dtype)
    return array


def _ref(array):
    return _core.TensorRef(array, array.ctypes.data, _DTYPES[array.dtype], list(array.shape), -1)


def _allocator(dtype):
    def allocate(shape):
        return _ref(np.empty(shape, dtype=dtype))
    return allocate


def _spec(kind, name, source, output=None, allocate=None, op=Sum, prescale=1.0, postscale=1.0,
          root=0, splits=()):
    """The typed request (ronde._core.Request) the runtime takes, on the global process set."""
    return _core.Request(kind, name, _ref(source), _ref(output) if output is not None else None,
                         _CORE_OPS[op], float(prescale), float(postscale), 0, int(root),
                         [int(s) for s in splits], allocate)


def _check_op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        op = Average if average else Sum
    if op is None:
        op = Average
    if op not in _CORE_OPS:
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def _check_process_set(process_set):
    if process_set is not None and getattr(process_set, "process_set_id", 0) != 0:
        raise ValueError("ronde.mxnet runs on the global process set only")


def _back(array, like):
    return mx.nd.array(array, ctx=like.context, dtype=array.dtype)


def _write(tensor, array):
    tensor[:] = mx.nd.array(array, ctx=tensor.context, dtype=tensor.dtype)
    return tensor


def _allreduce_arrays(tensors, name, op, prescale_factor, postscale_factor, kind="allreduce"):
    sources = [_host(t) for t in tensors]
    if len(tensors) == 1:
        names = [_name(kind, name)]
    else:
        base = _name(kind, name)
        names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    specs = [_spec(_ALLREDUCE, n, s, s, op=op, prescale=prescale_factor,
                   postscale=postscale_factor) for s, n in zip(sources, names)]
    handles = _core.enqueue_group(specs) if len(specs) > 1 else [_core.enqueue(specs[0])]
    for h in handles:
        h.wait()
    return sources


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None, op=None):
    """Horovod's hvd.allreduce: a new NDArray with the reduction of `tensor` over the ranks
    (op Average by default). `priority` is accepted and ignored (the runtime orders by
    negotiation)."""
    _check_process_set(process_set)
    op = _check_op(op, average)
    (out,) = _allreduce_arrays([tensor], name, op, prescale_factor, postscale_factor)
    return _back(out, tensor)


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None, op=None):
    """Horovod's hvd.allreduce_: reduces `tensor` in place and returns it."""
    _check_process_set(process_set)
    op = _check_op(op, average)
    (out,) = _allreduce_arrays([tensor], name, op, prescale_factor, postscale_factor)
    return _write(tensor, out)


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None, op=None):
    """Horovod's hvd.grouped_allreduce: one negotiated, fused group; new NDArrays."""
    _check_process_set(process_set)
    op = _check_op(op, average)
    outs = _allreduce_arrays(list(tensors), name, op, prescale_factor, postscale_factor,
                             "grouped_allreduce")
    return [_back(o, t) for o, t in zip(outs, tensors)]


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None, op=None):
    """Horovod's hvd.grouped_allreduce_: the group reduced in place."""
    _check_process_set(process_set)
    op = _check_op(op, average)
    outs = _allreduce_arrays(list(tensors), name, op, prescale_factor, postscale_factor,
                             "grouped_allreduce")
    return [_write(t, o) for o, t in zip(outs, tensors)]


def allgather(tensor, name=None, priority=0, process_set=None):
    """Horovod's hvd.allgather: every rank's tensor concatenated along the first dimension
    (ranks may differ in that dimension)."""
    _check_process_set(process_set)
    source = _host(tensor)
    handle = _core.enqueue(_spec(_ALLGATHER, _name("allgather", name), source,
                                 allocate=_allocator(source.dtype)))
    handle.wait()
    return _back(handle.output(), tensor)


def broadcast(tensor, root_rank, name=None, priority=0, process_set=None):
    """Horovod's hvd.broadcast: a new NDArray holding root_rank's `tensor`."""
    _check_process_set(process_set)
    source = _host(tensor)
    handle = _core.enqueue(_spec(_BROADCAST, _name("broadcast", name), source, source,
                                 root=root_rank))
    handle.wait()
    return _back(source, tensor)


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=None):
    """Horovod's hvd.broadcast_: overwrites `tensor` with root_rank's, returns it."""
    _check_process_set(process_set)
    source = _host(tensor)
    handle = _core.enqueue(_spec(_BROADCAST, _name("broadcast", name), source, source,
                                 root=root_rank))
    handle.wait()
    return _write(tensor, source)


def alltoall(tensor, splits=None, name=None, priority=0, process_set=None):
    """Horovod's hvd.alltoall: rows splits[j] go to rank j (equal splits by default); returns
    the rows received, in rank order."""
    _check_process_set(process_set)
    source = _host(tensor)
    if splits is None:
        split_list = []
    else:
        split_list = [int(s) for s in np.asarray(
            splits.asnumpy() if isinstance(splits, mx.nd.NDArray) else splits).reshape(-1)]
    handle = _core.enqueue(_spec(_ALLTOALL, _name("alltoall", name), source,
                                 allocate=_allocator(source.dtype), splits=split_list))
    handle.wait()
    return _back(handle.output(), tensor)


def barrier(process_set=None):
    _check_process_set(process_set)
    _core.enqueue(_core.Request(_core.RequestKind.BARRIER, _name("barrier", None), None, None,
                                _core.ReduceOp.SUM, 1.0, 1.0, 0, 0, [], None)).wait()
