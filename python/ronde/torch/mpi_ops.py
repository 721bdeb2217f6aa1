"""Collectives on torch tensors, with Horovod's names, signatures, defaults and semantics.

Every collective is named; unnamed ones get ``<kind>.noname.<n>`` from a per-process counter,
so ranks that call collectives in the same order agree on the names. Async calls return an
integer handle for ``poll`` and ``synchronize``; the request holds the tensors it reads and
writes until it completes.
"""

import collections
import itertools
import numbers
import warnings

import torch

from ronde import _core
from ronde.torch import cuda_streams
from ronde.torch.process_sets import global_process_set

# Reduction ops, as Horovod numbers them.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_CORE_OPS = {Sum: _core.ReduceOp.SUM, Average: _core.ReduceOp.AVERAGE, Min: _core.ReduceOp.MIN,
             Max: _core.ReduceOp.MAX, Product: _core.ReduceOp.PRODUCT,
             Adasum: _core.ReduceOp.ADASUM}
# The same as ints, for the in-place allreduce's one-call path (an enum costs a conversion).
_CORE_OP_CODES = {op: int(core) for op, core in _CORE_OPS.items()}

_ALLREDUCE = _core.RequestKind.ALLREDUCE
_ALLGATHER = _core.RequestKind.ALLGATHER
_BROADCAST = _core.RequestKind.BROADCAST
_ALLTOALL = _core.RequestKind.ALLTOALL
_REDUCESCATTER = _core.RequestKind.REDUCESCATTER
_BARRIER = _core.RequestKind.BARRIER
_JOIN = _core.RequestKind.JOIN

# Looked up once: these run for every request.
_Request = _core.Request
_TensorRef = _core.TensorRef
_enqueue = _core.enqueue
_enqueue_allreduce_ = _core.enqueue_allreduce_

# ronde::DataType codes, as TensorRef takes them
_DTYPES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.bfloat16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bool: 9,
}

HorovodInternalError = _core.RondeError
RondeError = _core.RondeError
MismatchError = _core.MismatchError

# Unnamed requests are numbered per kind and process set, so a rank outside a set (or one that
# ran a different number of another kind) still agrees with its peers on the next name.
_counters = collections.defaultdict(itertools.count)
_next_handle = itertools.count(1)
# handle -> (core handle, finish(core handle) -> result, or None: the result is `value`, value)
_handles = {}


def _reset_naming():
    """Forgets the numbering and the handles of the previous init: after shutdown and init
    every rank starts again from ``<kind>.noname.0``, as its peers do."""
    _counters.clear()
    _handles.clear()  # handle numbers keep growing: an old handle never names a new request


def _next_number(kind, process_set=global_process_set):
    return next(_counters[(kind, process_set.process_set_id)])


def _name(kind, name, process_set=global_process_set):
    if name is not None:
        return kind + "." + name if name.__class__ is str else "%s.%s" % (kind, name)
    set_id = process_set.process_set_id
    number = _next_number(kind, process_set)
    if set_id == 0:
        return "%s.noname.%d" % (kind, number)
    return "%s.noname.set%d.%d" % (kind, set_id, number)


def _ref(tensor):
    """The runtime's view of a contiguous tensor; the request holds `tensor` alive."""
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError("ronde does not support tensors of dtype %s" % tensor.dtype)
    device = tensor.get_device() if tensor.is_cuda else -1
    return _TensorRef(tensor, tensor.data_ptr(), code, tensor.shape, device)


def _allocator(like):
    def allocate(shape):
        return _ref(torch.empty(shape, dtype=like.dtype, device=like.device))
    return allocate


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


def _register(core_handle, finish, value=None):
    """An integer handle for `core_handle`; synchronize returns finish(core handle), or
    `value` when there is no finish."""
    handle = next(_next_handle)
    _handles[handle] = (core_handle, finish, value)
    return handle


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
    if handle not in _handles:
        raise ValueError("poll: unknown handle %r" % (handle,))
    return _handles[handle][0].poll()


def synchronize(handle):
    """Waits for the async operation behind `handle` and returns its result."""
    if callable(handle):  # sparse_allreduce_async's handle: calling it is Horovod's way
        return handle()
    entry = _handles.pop(handle, None)
    if entry is None:
        return None
    core_handle, finish, value = entry
    core_handle.wait()
    return value if finish is None else finish(core_handle)


# --- allreduce -------------------------------------------------------------------------------

def _allreduce_spec(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    return _spec(_ALLREDUCE, name, tensor, output, op=op, prescale=prescale_factor,
                 postscale=postscale_factor, process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an out-of-place allreduce; synchronize(handle) returns the reduced tensor."""
    op = _check_op(op, average)
    source = tensor.contiguous()
    output = torch.empty_like(source)
    request = _Request(_ALLREDUCE, _name("allreduce", name, process_set), _ref(source),
                       _ref(output), _CORE_OPS[op], prescale_factor, postscale_factor,
                       process_set.process_set_id)
    if source.is_cuda:
        cuda_streams.attach(request, source)
    core = _enqueue(request)
    return _register(core, None, output)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce; synchronize(handle) returns `tensor`."""
    # The hot path of every gradient hook: one view of the tensor, one typed request.
    op = _check_op(op, average)
    if tensor.is_contiguous():
        target, finish = tensor, None
    else:
        target, copy_back = _writable(tensor)
        finish = lambda h: copy_back(target)  # noqa: E731
    if target.is_cuda:  # the typed request, which carries the stream
        core = _enqueue(_allreduce_spec(target, target, _name("allreduce", name, process_set), op,
                                        prescale_factor, postscale_factor, process_set))
        return _register(core, finish, target)
    code = _DTYPES.get(target.dtype)
    if code is None:
        raise ValueError("ronde does not support tensors of dtype %s" % target.dtype)
    core = _enqueue_allreduce_(target, target.data_ptr(), code, target.shape,
                               target.get_device() if target.is_cuda else -1,
                               _name("allreduce", name, process_set), _CORE_OP_CODES[op],
                               prescale_factor, postscale_factor, process_set.process_set_id)
    return _register(core, finish, target)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks and returns the result; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, average)
    compressed, context = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(reduced, context)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place over all ranks and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_names(kind, name, count, process_set=global_process_set):
    base = _name(kind, name, process_set)
    return ["%s.%d" % (base, i) for i in range(count)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _check_op(op, average)
    sources = [t.contiguous() for t in tensors]
    outputs = [torch.empty_like(t) for t in sources]
    names = _grouped_names("grouped_allreduce", name, len(tensors), process_set)
    specs = [_allreduce_spec(s, o, n, op, prescale_factor, postscale_factor, process_set)
             for s, o, n in zip(sources, outputs, names)]
    cores = _core.enqueue_group(specs)
    return _register(_Group(cores), lambda h: outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _check_op(op, average)
    staged = [_writable(t) for t in tensors]
    names = _grouped_names("grouped_allreduce", name, len(tensors), process_set)
    specs = [_allreduce_spec(t, t, n, op, prescale_factor, postscale_factor, process_set)
             for (t, _), n in zip(staged, names)]
    cores = _core.enqueue_group(specs)
    return _register(_Group(cores), lambda h: [finish(t) for t, finish in staged])


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors as one negotiated, fused group; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _Group:
    """Several core handles behaving as one."""

    def __init__(self, cores):
        self.cores = cores

    def poll(self):
        return all(c.poll() for c in self.cores)

    def wait(self):
        for c in self.cores:
            c.wait()


# --- allgather -------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather along the first dimension (ranks may differ in that dimension)."""
    source = tensor.contiguous()
    core = _enqueue(_spec(_ALLGATHER, _name("allgather", name, process_set), source,
                               allocate=_allocator(source), process_set=process_set))
    return _register(core, lambda h: h.output())


def _my_offset(rows, process_set):
    """Where this rank's rows start in an allgather of every member's `rows`."""
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    return int(counts[:process_set.rank()].sum().item())


def _rows(tensor):
    return tensor.shape[0] if tensor.dim() > 0 else 1


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = _rows(tensor)
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: the average over ranks of the output's gradient, this rank's rows.
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        offset = _my_offset(ctx.rows, ctx.process_set)
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension; differentiable."""
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    sources = [t.contiguous() for t in tensors]
    names = _grouped_names("grouped_allgather", name, len(tensors), process_set)
    specs = [_spec(_ALLGATHER, n, s, allocate=_allocator(s), process_set=process_set)
             for s, n in zip(sources, names)]
    group = _Group(_core.enqueue_group(specs))
    return _register(group, lambda h: [c.output() for c in h.cores])


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [_rows(t) for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.process_set)
        counts = grouped_allgather([torch.tensor([r], dtype=torch.int64) for r in ctx.rows],
                                   process_set=ctx.process_set)
        me = ctx.process_set.rank()
        slices = [g.narrow(0, int(c[:me].sum().item()), rows)
                  for g, c, rows in zip(grads, counts, ctx.rows)]
        return (None, None) + tuple(slices)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors as one negotiated group; differentiable like allgather."""
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# --- broadcast -------------------------------------------------------------------------------

def _root_index(root_rank, process_set):
    """The runtime's root (an index into the set) for Horovod's root_rank (a global rank).

    Every member checks the same facts, so a root outside the set fails on every rank, before
    anything is submitted."""
    root_rank = int(root_rank)
    if process_set.ranks is None:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError("broadcast: root_rank %d is not in %r; root_rank is a global rank"
                         % (root_rank, process_set))
    return process_set.ranks.index(root_rank)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root_rank's `tensor` (root_rank: a global rank)."""
    root = _root_index(root_rank, process_set)
    target, finish = _writable(tensor)
    core = _enqueue(_spec(_BROADCAST, _name("broadcast", name, process_set), target, target,
                               root=root, process_set=process_set))
    return _register(core, lambda h: finish(target))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an out-of-place broadcast; `tensor` is left as it is."""
    root = _root_index(root_rank, process_set)
    output = tensor.detach().clone(memory_format=torch.contiguous_format)
    core = _enqueue(_spec(_BROADCAST, _name("broadcast", name, process_set), output, output,
                               root=root, process_set=process_set))
    return _register(core, lambda h: output)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if _core.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank; differentiable. root_rank is a global rank,
    also in a process set (as in Horovod); one outside the set raises ValueError."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall --------------------------------------------------------------------------------

def _split_list(splits):
    """splits as a list of ints; a non-integer dtype is a ValueError (checked before any
    request is made, so every rank that passes the same kind of splits fails alike)."""
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError("alltoall: splits must have an integer dtype, not %s" % splits.dtype)
        return [int(s) for s in splits.reshape(-1).tolist()]
    values = list(splits)
    for s in values:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise ValueError("alltoall: splits must be integers, not %r (%s)"
                             % (s, type(s).__name__))
    return [int(s) for s in values]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize(handle) returns (output, received_splits)."""
    source = tensor.contiguous()
    if splits is None:
        ranks = process_set.size()
        rows = source.shape[0] if source.dim() > 0 else 0
        if rows % ranks != 0:
            raise ValueError("alltoall without splits needs the first dimension (%d) to be "
                             "divisible by the number of ranks (%d)" % (rows, ranks))
        split_list = [rows // ranks] * ranks
    else:
        split_list = _split_list(splits)
    core = _enqueue(_spec(_ALLTOALL, _name("alltoall", name, process_set), source,
                               allocate=_allocator(source), splits=split_list,
                               process_set=process_set))

    def finish(h):
        return h.output(), torch.tensor(h.result(), dtype=torch.int32)
    return _register(core, finish)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *ignored):
        grad, _ = alltoall(grad_output, splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] first-dimension rows to rank j and gathers what every rank sent here.

    Returns the gathered tensor, and with `splits` given also the rows received from each rank.
    Differentiable.
    """
    return _Alltoall.apply(tensor, splits, name, process_set)


# --- reducescatter ---------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter: rank r gets its share of the first dimension of the reduction."""
    op = _check_op(op, None)
    source = tensor.contiguous()
    core = _enqueue(_spec(_REDUCESCATTER, _name("reducescatter", name, process_set), source,
                               allocate=_allocator(source), op=op, prescale=prescale_factor,
                               postscale=postscale_factor, process_set=process_set))
    return _register(core, lambda h: h.output())


def _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor):
    if op not in (Sum, Average):
        raise NotImplementedError("reducescatter has a gradient for Sum and Average only")
    scale = prescale_factor * postscale_factor
    return scale / process_set.size() if op == Average else scale


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.scale = (op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        # Every rank's input reaches every rank's share: the gradient is the allgather of the
        # shares' gradients, scaled as the forward scaled (1/size for Average, as Horovod).
        grad = allgather(grad_output, process_set=ctx.process_set)
        return grad * _reducescatter_grad_scale(*ctx.scale), None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks and returns this rank's share of the first dimension
    (the first ``rows % size`` ranks get one extra row); differentiable for Sum and Average."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, None)
    compressed, context = compression.compress(tensor)
    output = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                  postscale_factor)
    return compression.decompress(output, context)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    op = _check_op(op, None)
    sources = [t.contiguous() for t in tensors]
    names = _grouped_names("grouped_reducescatter", name, len(tensors), process_set)
    specs = [_spec(_REDUCESCATTER, n, s, allocate=_allocator(s), op=op,
                   prescale=prescale_factor, postscale=postscale_factor,
                   process_set=process_set) for s, n in zip(sources, names)]
    group = _Group(_core.enqueue_group(specs))
    return _register(group, lambda h: [c.output() for c in h.cores])


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.scale = (op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        scale = _reducescatter_grad_scale(*ctx.scale)
        grads = grouped_allgather(list(grad_outputs), process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(g * scale for g in grads)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one negotiated group; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, None)
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                          postscale_factor, *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


# --- join and barrier ------------------------------------------------------------------------

def join(device=-1):
    """Marks this rank done: until every rank has joined, it contributes zeros to the other
    ranks' allreduces. Returns the rank that joined last."""
    core = _enqueue(_spec(_JOIN, _name("join", None), None))
    return synchronize(_register(core, lambda h: int(h.result()[0]) if h.result() else -1))


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set has reached the barrier."""
    core = _enqueue(_spec(_BARRIER, _name("barrier", None, process_set), None,
                               process_set=process_set))
    synchronize(_register(core, lambda h: None))
