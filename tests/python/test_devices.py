"""Tensors the runtime cannot read are refused before anything is submitted: a tensor on a
device that is neither host memory nor CUDA (here `meta`, which has no memory at all; mps and
xpu take the same check) or a sparse one. Before, a meta tensor's null address reached the
transports: allgather and alltoall crashed the process, others returned the meta tensor as if
reduced. The collectives that follow a refusal still work: nothing half-submitted is left."""

import pytest
import torch

import ronde.torch as hvd


def _meta(*shape):
    return torch.empty(*shape, device="meta")


def _sparse():
    dense = torch.zeros(4, 2)
    dense[1] = 1.0
    return dense.to_sparse()


# One entry per way a tensor reaches the runtime: the C++ one-call paths (in-place
# allreduce, single allgather and reducescatter, groups) and the Python typed requests
# (out-of-place allreduce, broadcast, alltoall, non-contiguous in-place tensors).
CALLS = {
    "allreduce": lambda t: hvd.allreduce(t),
    "allreduce_": lambda t: hvd.allreduce_(t),
    "allreduce_async_": lambda t: hvd.synchronize(hvd.allreduce_async_(t)),
    "allgather": lambda t: hvd.allgather(t),
    "broadcast": lambda t: hvd.broadcast(t, root_rank=0),
    "broadcast_": lambda t: hvd.broadcast_(t, root_rank=0),
    "alltoall": lambda t: hvd.alltoall(t),
    "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum),
    "grouped_allreduce": lambda t: hvd.grouped_allreduce([t, t.clone()]),
    "grouped_allreduce_": lambda t: hvd.grouped_allreduce_([t]),
    "grouped_allgather": lambda t: hvd.grouped_allgather([t]),
    "grouped_reducescatter": lambda t: hvd.grouped_reducescatter([t], op=hvd.Sum),
}


def _rows():
    return 2 * hvd.size()  # divisible for alltoall and reducescatter


@pytest.mark.parametrize("call", sorted(CALLS))
def test_meta_tensor_refused(call):
    with pytest.raises(ValueError, match="device meta") as caught:
        CALLS[call](_meta(_rows(), 3))
    assert isinstance(caught.value, hvd.RondeError)
    assert not isinstance(caught.value, hvd.HorovodInternalError)
    assert str(caught.value).endswith("rank %d" % hvd.rank()), caught.value


@pytest.mark.parametrize("call", ["allreduce_", "grouped_allreduce_", "broadcast_"])
def test_non_contiguous_meta_tensor_refused(call):
    # A non-contiguous tensor takes the staged (copy) path, which must check too.
    with pytest.raises(ValueError, match="device meta"):
        CALLS[call](_meta(3, _rows()).t())


@pytest.mark.parametrize("call", sorted(CALLS))
def test_sparse_tensor_refused(call):
    with pytest.raises(ValueError, match="sparse_coo") as caught:
        CALLS[call](_sparse())
    assert str(caught.value).endswith("rank %d" % hvd.rank()), caught.value


def test_collectives_work_after_refusals():
    for call in sorted(CALLS):
        with pytest.raises(ValueError):
            CALLS[call](_meta(_rows(), 3))
    got = hvd.allreduce(torch.full((3,), float(hvd.rank())), op=hvd.Sum)
    assert got.tolist() == [float(sum(range(hvd.size())))] * 3
    gathered = hvd.allgather(torch.tensor([hvd.rank()]))
    assert gathered.tolist() == list(range(hvd.size()))


def test_sparse_allreduce_async_still_takes_sparse():
    # The one collective that takes sparse tensors (Horovod's sparse_allreduce_async).
    reduced = hvd.synchronize(hvd.sparse_allreduce_async(_sparse(), name="devices.sparse",
                                                          op=hvd.Sum))
    expected = torch.zeros(4, 2)
    expected[1] = float(hvd.size())
    assert torch.equal(reduced.to_dense(), expected)
