"""Collectives on torch tensors, with Horovod's names, signatures, defaults and semantics.

The collectives live by topic (submission: ops, names and handles; allreduce_ops,
gather_ops, reducescatter_ops) and are importable from here, where Horovod has them; join
and barrier are here.
"""

from ronde.torch.allreduce_ops import (  # noqa: F401
    _Allreduce, _GroupedAllreduce, _allreduce_spec, allreduce, allreduce_, allreduce_async,
    allreduce_async_, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_)
from ronde.torch.gather_ops import (  # noqa: F401
    _Allgather, _Alltoall, _Broadcast, _GroupedAllgather, _my_offset, _root_index, _rows,
    _split_list, allgather, allgather_async, alltoall, alltoall_async, broadcast, broadcast_,
    broadcast_async, broadcast_async_, grouped_allgather, grouped_allgather_async)
from ronde.torch.process_sets import global_process_set
from ronde.torch.reducescatter_ops import (  # noqa: F401
    _GroupedReducescatter, _Reducescatter, _reducescatter_grad_scale, grouped_reducescatter,
    grouped_reducescatter_async, reducescatter, reducescatter_async)
from ronde.torch.submission import (  # noqa: F401
    _ALLGATHER, _ALLREDUCE, _ALLTOALL, _BARRIER, _BROADCAST, _CORE_OP_CODES, _CORE_OPS, _DTYPES,
    _JOIN, _REDUCESCATTER, _joined_all, Adasum, Average, HorovodInternalError, Max, Min, MismatchError,
    Product, RondeError, Sum, _Group, _allocator, _check_op, _counters, _enqueue, _handles,
    _member_names, _name, _next_number, _ref, _register, _reset_naming, _spec, _writable, poll,
    synchronize)


def join(device=-1):
    """Marks this rank done: until every rank has joined, it contributes zeros to the other
    ranks' allreduces. Returns the rank that joined last."""
    core = _enqueue(_spec(_JOIN, _name("join", None), None))

    def finish(h):
        _joined_all()  # every rank is here together: unnamed calls number in step again
        return int(h.result()[0]) if h.result() else -1
    return synchronize(_register(core, finish))


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set has reached the barrier."""
    core = _enqueue(_spec(_BARRIER, _name("barrier", None, process_set), None,
                               process_set=process_set))
    synchronize(_register(core, lambda h: None))
