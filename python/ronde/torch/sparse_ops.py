"""Allreduce of sparse (COO) tensors, as Horovod does it: an allgather of every rank's indices
and values, so no rank needs to know the others' non-zero pattern in advance."""

import torch

from ronde.torch.mpi_ops import (Average, Sum, _name, allgather_async, poll,
                                 synchronize)
from ronde.torch.process_sets import global_process_set


class _SparseHandle:
    """Horovod's sparse handle is a function that returns the result; this one is also
    accepted by poll() and synchronize()."""

    def __init__(self, tensor, indices_handle, values_handle, op, process_set):
        self._tensor = tensor
        self._indices = indices_handle
        self._values = values_handle
        self._op = op
        self._process_set = process_set
        self._result = None

    def poll(self):
        return self._result is not None or (poll(self._indices) and poll(self._values))

    def __call__(self):
        if self._result is None:
            values = synchronize(self._values)
            indices = synchronize(self._indices)
            if self._op == Average:
                values = values / self._process_set.size()
            # Coalescing sums the entries that several ranks sent for one index: the same
            # tensor as Horovod's uncoalesced result, without its duplicates.
            self._result = torch.sparse_coo_tensor(indices.t(), values, self._tensor.shape,
                                                   dtype=values.dtype).coalesce()
        return self._result


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Horovod's sparse_allreduce_async: starts the sum (op=Sum) or average (op=Average) of a
    sparse COO `tensor` over the ranks. Returns a handle: call it, or pass it to
    synchronize(), for the coalesced sparse result."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse (COO) tensor; use allreduce")
    if op not in (Sum, Average):
        raise ValueError("sparse_allreduce_async supports op=Sum and op=Average only")
    base = _name("sparse_allreduce", name, process_set)
    # allgather concatenates along the first dimension: one row per non-zero entry.
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    indices_handle = allgather_async(indices, base + ".indices", process_set)
    values_handle = allgather_async(values, base + ".values", process_set)
    return _SparseHandle(tensor, indices_handle, values_handle, op, process_set)
