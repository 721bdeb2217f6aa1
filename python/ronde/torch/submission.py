"""How a torch collective becomes a ronde request: Horovod's op numbers, dtype codes, request
names, typed requests, and the integer handles that poll and synchronize take.

Every collective is named; unnamed ones get ``<kind>.noname.<n>`` from a per-process counter,
so ranks that call collectives in the same order agree on the names. Async calls return an
integer handle for ``poll`` and ``synchronize``; the request holds the tensors it reads and
writes until it completes. The handles live in a C++ table (ronde._core.HandleTable), which
also takes the common submissions of host tensors in one call each, reading the tensors
itself: the in-place allreduce of a gradient hook, single allgathers and reducescatters, and
grouped allreduces, allgathers and reducescatters (no Python Request, dict entry, tuple or
handle object per tensor; outputs ronde made are adopted there too). CUDA tensors, and the
few cases listed at HandleTable.group_, take the general path: a typed Request per tensor.
"""

import collections
import itertools
import warnings

import torch
import torch.utils.dlpack

from ronde import _core
from ronde.torch import cuda_streams
from ronde.torch.process_sets import global_process_set
# Horovod's op numbers (re-exported), ronde's ReduceOp for each, ronde's dtype codes.
from ronde.common.reduce_ops import CORE_OPS as _CORE_OPS, DTYPE_CODES
from ronde.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401

# The same as ints, for the in-place allreduce's one-call path (an enum costs a conversion).
_CORE_OP_CODES = {op: int(core) for op, core in _CORE_OPS.items()}

_ALLREDUCE = _core.RequestKind.ALLREDUCE
_ALLGATHER = _core.RequestKind.ALLGATHER
_BROADCAST = _core.RequestKind.BROADCAST
_ALLTOALL = _core.RequestKind.ALLTOALL
_REDUCESCATTER = _core.RequestKind.REDUCESCATTER
# The same as ints, for the handle table's one-call paths.
_ALLREDUCE_CODE = int(_ALLREDUCE)
_ALLGATHER_CODE = int(_ALLGATHER)
_REDUCESCATTER_CODE = int(_REDUCESCATTER)
_BARRIER = _core.RequestKind.BARRIER
_JOIN = _core.RequestKind.JOIN

# Looked up once: these run for every request.
_Request = _core.Request
_TensorRef = _core.TensorRef
_enqueue = _core.enqueue
_enqueue_allreduce_ = _core.enqueue_allreduce_
_HOST_OUTPUT = _core.HOST_OUTPUT
# torch's own capsule reader, which torch.utils.dlpack.from_dlpack calls after its checks
# (about 2 us per output saved); both torch 1.13 and 2.x have it.
_from_dlpack = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack

# ronde::DataType codes, as TensorRef takes them
# (torch 1.13 has no uint16: a dtype this torch lacks is left out.)
_DTYPES = {getattr(torch, name): code for name, code in DTYPE_CODES.items()
           if hasattr(torch, name)}

HorovodInternalError = _core.HorovodInternalError
RondeError = _core.RondeError
MismatchError = _core.MismatchError

# Unnamed requests are numbered per kind and process set, so a rank outside a set (or one that
# ran a different number of another kind) still agrees with its peers on the next name.
_counters = collections.defaultdict(itertools.count)
# How many joins completed since init: the numbering's epoch. A joined rank makes none of the
# calls its peers make until the last rank joins, so its counters fall behind theirs; a
# completed join is the one point every rank reaches together, and there every rank starts
# numbering again under the next epoch (``<kind>.noname.j<epoch>.<n>``: no name of an earlier
# epoch, perhaps still in flight, is reused).
_epoch = {"joins": 0}


def _reset_naming():
    """Forgets the numbering and the handles of the previous init: after shutdown and init
    every rank starts again from ``<kind>.noname.0``, as its peers do."""
    _counters.clear()
    _epoch["joins"] = 0
    _handles.clear()  # handle numbers keep growing: an old handle never names a new request


def _joined_all():
    """A join completed on every rank: the numbering starts again in step (see _epoch)."""
    _counters.clear()
    _epoch["joins"] += 1


def _next_number(kind, process_set=global_process_set):
    return next(_counters[(kind, process_set.process_set_id)])


def _name(kind, name, process_set=global_process_set):
    if name is not None:
        return kind + "." + name if name.__class__ is str else "%s.%s" % (kind, name)
    set_id = process_set.process_set_id
    number = _next_number(kind, process_set)
    epoch = _epoch["joins"]
    if epoch:
        number = "j%d.%d" % (epoch, number)
    if set_id == 0:
        return "%s.noname.%s" % (kind, number)
    return "%s.noname.set%d.%s" % (kind, set_id, number)


def _check_readable(tensor):
    """Refuses a tensor the runtime cannot read: one on a device that is neither host memory
    nor CUDA (meta, mps, xpu: its address would be read as host memory, or is null), or a
    sparse one (only sparse_allreduce_async and DistributedOptimizer take those). The handle
    table's one-call paths check the same in C++ (TensorReader)."""
    if tensor.layout is not torch.strided:
        what = "of layout %s" % tensor.layout
    elif not (tensor.is_cpu or tensor.is_cuda):
        what = "on device %s" % tensor.device
    else:
        return
    raise _core.InvalidArgumentError(
        "ronde does not support tensors %s (only dense tensors in host memory or on a CUDA "
        "device); rank %d" % (what, _core.rank()))


def _ref(tensor):
    """The runtime's view of a contiguous tensor; the request holds `tensor` alive."""
    if not tensor.is_cpu:  # the common case, decided at once
        _check_readable(tensor)
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError("ronde does not support tensors of dtype %s" % tensor.dtype)
    device = tensor.get_device() if tensor.is_cuda else -1
    return _TensorRef(tensor, tensor.data_ptr(), code, tensor.shape, device)


def _allocator(like):
    """The output allocator of a request on `like`. Host outputs are made by ronde on its own
    thread without the GIL (HOST_OUTPUT) and adopted by `_output` through DLPack; a Python
    callable here would take the GIL for every tensor, 31 us each in a fused 200-tensor
    allgather. CUDA outputs come from torch's allocator on the submitting stream, and bool
    ones too (torch 1.13's DLPack has no bool)."""
    if like.is_cuda:
        return cuda_streams.allocator_on_current_stream(
            like.device, lambda shape: _ref(torch.empty(shape, dtype=like.dtype,
                                                        device=like.device)))
    if like.dtype is not torch.bool:
        return _HOST_OUTPUT

    def allocate(shape):
        return _ref(torch.empty(shape, dtype=like.dtype, device=like.device))
    return allocate


def _output(core):
    """A request's output as a torch tensor: the tensor its allocator made, or the memory
    ronde made (a DLPack capsule), adopted without a copy."""
    out = core.output()
    return out if out is None or isinstance(out, torch.Tensor) else _from_dlpack(out)


def _spec(kind, name, tensor, output=None, allocate=None, op=Sum, prescale=1.0, postscale=1.0,
          root=0, splits=(), process_set=global_process_set):
    """The typed request (ronde._core.Request) for `tensor`; an in-place output shares its view."""
    source = _ref(tensor) if tensor is not None else None
    if output is None:
        target = None
    else:
        target = source if output is tensor else _ref(output)
    request = _Request(kind, name, source, target, _CORE_OPS[op], float(prescale),
                       float(postscale), process_set.process_set_id, int(root), list(splits),
                       allocate)
    if tensor is not None and tensor.is_cuda:
        cuda_streams.attach(request, tensor)
    return request


# handle -> (core handle, finish(core handle) -> result, or None: the result is `value`, value)
_handles = _core.HandleTable(_DTYPES, _name, _from_dlpack)
_register = _handles.add  # (core handle, finish, value=None) -> an integer handle
# allreduce_(tensor, name, op code, prescale, postscale, process set) -> handle, or None when
# the tensor is not contiguous
_allreduce_in_place = _handles.allreduce_
# submit_(kind code, tensor, name, op code, prescale, postscale, process set) -> handle, or
# None (CUDA, bool): an allgather or reducescatter whose output ronde makes
_submit_one = _handles.submit_
# group_(kind code, tensors, outputs or None, group name, op code, prescale, postscale,
# process set) -> handle, or None with nothing submitted (see HandleTable.group_)
_submit_group = _handles.group_
_synchronize_handle = _handles.synchronize


def _check_op(op, average):
    if average is None:  # the common calls, decided at once
        if op is None:
            return Average
        if op in _CORE_OPS:
            return op
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op not in _CORE_OPS:
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def _writable(tensor):
    """A contiguous tensor to write into, and how to copy it back into `tensor`."""
    if tensor.is_contiguous():
        return tensor, lambda out: out
    staged = tensor.contiguous()

    def copy_back(out):
        tensor.copy_(out)
        return tensor
    return staged, copy_back


def poll(handle):
    """True once the async operation behind `handle` has finished; never blocks."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle.poll()
    return _handles.poll(handle)  # ValueError for an unknown handle


def synchronize(handle):
    """Waits for the async operation behind `handle` and returns its result."""
    if handle.__class__ is int:  # the common case, decided at once
        return _synchronize_handle(handle)
    if callable(handle):  # sparse_allreduce_async's handle: calling it is Horovod's way
        return handle()
    return _synchronize_handle(handle)  # None for an unknown handle


def _member_names(group_name, count):
    """The names of a group's members, as HandleTable.group_ makes them."""
    return ["%s.%d" % (group_name, i) for i in range(count)]


def _as_sequence(tensors):
    """A group's tensors as a list or tuple, read once by the fast path and again, if it
    declines them, by the general one."""
    return tensors if isinstance(tensors, (list, tuple)) else list(tensors)


class _Group:
    """Several core handles behaving as one."""

    def __init__(self, cores):
        self.cores = cores

    def poll(self):
        return all(c.poll() for c in self.cores)

    def wait(self):
        for c in self.cores:
            c.wait()


