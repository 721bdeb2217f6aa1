"""allgather, broadcast and alltoall on torch tensors (Horovod's signatures and semantics),
each with its gradient."""

import numbers

import torch

from ronde.torch.allreduce_ops import allreduce, grouped_allreduce
from ronde.torch.process_sets import global_process_set
from ronde.torch.submission import (_ALLGATHER, _ALLGATHER_CODE, _ALLTOALL, _BROADCAST, Average,
                                    _Group, _allocator, _as_sequence, _check_readable, _core,
                                    _enqueue, _member_names, _name, _output, _register, _spec,
                                    _submit_group, _submit_one, _writable, synchronize)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather along the first dimension (ranks may differ in that dimension)."""
    handle = _submit_one(_ALLGATHER_CODE, tensor, name, 0, 1.0, 1.0, process_set)
    if handle is not None:
        return handle
    source = tensor.contiguous()
    core = _enqueue(_spec(_ALLGATHER, _name("allgather", name, process_set), source,
                               allocate=_allocator(source), process_set=process_set))
    return _register(core, _output)


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
    tensors = _as_sequence(tensors)
    group_name = _name("grouped_allgather", name, process_set)
    handle = _submit_group(_ALLGATHER_CODE, tensors, None, group_name, 0, 1.0, 1.0, process_set)
    if handle is not None:
        return handle
    sources = [t.contiguous() for t in tensors]
    names = _member_names(group_name, len(tensors))
    specs = [_spec(_ALLGATHER, n, s, allocate=_allocator(s), process_set=process_set)
             for s, n in zip(sources, names)]
    group = _Group(_core.enqueue_group(specs))
    return _register(group, lambda h: [_output(c) for c in h.cores])


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
    _check_readable(tensor)
    target, finish = _writable(tensor)
    core = _enqueue(_spec(_BROADCAST, _name("broadcast", name, process_set), target, target,
                               root=root, process_set=process_set))
    return _register(core, lambda h: finish(target))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an out-of-place broadcast; `tensor` is left as it is."""
    root = _root_index(root_rank, process_set)
    _check_readable(tensor)
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
    _check_readable(tensor)
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
        return _output(h), torch.tensor(h.result(), dtype=torch.int32)
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


