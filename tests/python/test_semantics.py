"""Horovod's semantics where a naive port differs: global roots in process sets, sparse
allreduce, splits dtypes, and collectives while some ranks have joined."""

import time

import pytest
import torch

import ronde.torch as hvd


def finish_within(handle, seconds=20.0):
    """synchronize(handle), failing the test instead of hanging when it never completes."""
    deadline = time.monotonic() + seconds
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, "the request did not complete in %ss" % seconds
        time.sleep(0.01)
    return hvd.synchronize(handle)


@pytest.fixture
def upper_set():
    """The ranks 1..size-1 as a process set (global rank 1 is its first member)."""
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    upper = hvd.add_process_set(list(range(1, hvd.size())))
    yield upper
    hvd.remove_process_set(upper)


def test_broadcast_root_is_a_global_rank_in_a_process_set(upper_set):
    if not upper_set.included():
        return
    root = hvd.size() - 1  # global rank; its index in the set is size - 2
    t = torch.full((4,), float(hvd.rank()))
    assert hvd.broadcast(t, root_rank=root, process_set=upper_set).tolist() == [root] * 4
    h = hvd.broadcast_async(t, root_rank=1, process_set=upper_set)
    assert hvd.synchronize(h).tolist() == [1.0] * 4
    hvd.broadcast_(t, root_rank=root, process_set=upper_set)
    assert t.tolist() == [root] * 4
    u = torch.full((2,), float(hvd.rank()))
    assert hvd.synchronize(hvd.broadcast_async_(u, 1, process_set=upper_set)) is u
    assert u.tolist() == [1.0, 1.0]
    got = hvd.broadcast_object({"from": hvd.rank()}, root_rank=root, process_set=upper_set)
    assert got == {"from": root}


def test_broadcast_gradient_in_a_process_set_goes_to_the_global_root(upper_set):
    if not upper_set.included():
        return
    root = hvd.size() - 1
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    w = torch.arange(3, dtype=torch.float64) + hvd.rank()
    (hvd.broadcast(x, root_rank=root, process_set=upper_set) * w).sum().backward()
    # Horovod: the root gets the members' average gradient, the other members zeros.
    members_w = hvd.allgather(w.unsqueeze(0), process_set=upper_set)
    expected = members_w.mean(0) if hvd.rank() == root else torch.zeros(3, dtype=torch.float64)
    assert torch.allclose(x.grad, expected)


def test_broadcast_root_outside_the_set_is_value_error_on_every_rank(upper_set):
    if not upper_set.included():
        return
    t = torch.ones(3)
    for call in (lambda: hvd.broadcast(t, 0, process_set=upper_set),
                 lambda: hvd.broadcast_(t, 0, process_set=upper_set),
                 lambda: hvd.broadcast_async(t, 0, process_set=upper_set),
                 lambda: hvd.broadcast_async_(t, 0, process_set=upper_set),
                 lambda: hvd.broadcast_object(1, root_rank=0, process_set=upper_set)):
        with pytest.raises(ValueError, match="not in"):
            call()
    # Nothing was submitted: the set still works, with the same unnamed numbering everywhere.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=upper_set).item() == \
        hvd.size() - 1


def test_broadcast_parameters_and_state_in_a_process_set(upper_set):
    if not upper_set.included():
        return
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.rank(), momentum=0.5)
    root = hvd.size() - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=upper_set)
    hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=upper_set)
    torch.manual_seed(root)
    expected = torch.nn.Linear(3, 2)
    assert torch.equal(model.weight, expected.weight) and torch.equal(model.bias, expected.bias)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * root)


@pytest.mark.parametrize("splits", [torch.tensor([1.0]), torch.tensor([True]), [1.0], [0.5]])
def test_alltoall_splits_of_a_non_integer_dtype_are_value_errors(splits):
    n = hvd.size()
    bad = splits.repeat(n) if torch.is_tensor(splits) else splits * n
    with pytest.raises(ValueError, match="integer"):
        hvd.alltoall(torch.ones(n, 2), splits=bad)
    with pytest.raises(ValueError, match="integer"):
        hvd.alltoall_async(torch.ones(n, 2), splits=bad)
    # Nothing was submitted: an unnamed alltoall still meets its peers.
    out, received = hvd.alltoall(torch.ones(n, 2), splits=torch.ones(n, dtype=torch.int64))
    assert out.shape == (n, 2) and received.tolist() == [1] * n


def rank_sparse(rank, shape=(6, 3)):
    """Rank r has r + 1 non-zero rows (one duplicated index, left uncoalesced); rank 0 none."""
    if rank == 0:
        return torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64),
                                       torch.zeros(0, shape[1]), shape)
    rows = [(rank + i) % shape[0] for i in range(rank + 1)] + [rank % shape[0]]
    values = torch.stack([torch.full((shape[1],), float(10 * rank + i))
                          for i in range(len(rows))])
    return torch.sparse_coo_tensor(torch.tensor([rows]), values, shape)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_sparse_allreduce_async(op):
    handle = hvd.sparse_allreduce_async(rank_sparse(hvd.rank()), name="sparse.%d" % op, op=op)
    assert callable(handle)
    out = handle()
    expected = sum(rank_sparse(r).to_dense() for r in range(hvd.size()))
    if op == hvd.Average:
        expected = expected / hvd.size()
    assert out.is_sparse and out.is_coalesced()
    assert torch.allclose(out.to_dense(), expected)
    again = hvd.sparse_allreduce_async(rank_sparse(hvd.rank()), name="sparse.sync", op=op)
    assert torch.allclose(hvd.synchronize(again).to_dense(), expected)
    with pytest.raises(ValueError):
        hvd.sparse_allreduce_async(torch.ones(2), name="dense", op=op)


def test_join_while_several_ranks_are_active():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    # The same allgather twice, so that the runtime's response cache knows it.
    for _ in range(2):
        assert hvd.allgather(torch.tensor([hvd.rank()]), name="join.cached").tolist() == \
            list(range(hvd.size()))
    active = hvd.add_process_set(list(range(1, hvd.size())))
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        # Rank 0 contributes zeros to allreduces until everyone has joined.
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="join.active")
        assert out.tolist() == [hvd.size() - 1.0] * 2
        # Collectives of a set without the joined rank run as usual.
        got = hvd.allgather(torch.tensor([hvd.rank()]), name="join.set", process_set=active)
        assert got.tolist() == list(range(1, hvd.size()))
        got = hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=hvd.size() - 1,
                            name="join.set", process_set=active)
        assert got.tolist() == [hvd.size() - 1]
        # An allgather cannot complete without rank 0: it fails instead of waiting, also
        # where the cached fast path would have waited for rank 0's bit.
        for name in ("join.fresh", "join.cached"):
            with pytest.raises(hvd.RondeError, match="joined"):
                finish_within(hvd.allgather_async(torch.tensor([hvd.rank()]), name=name))
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="join.still_active")
        assert out.tolist() == [hvd.size() - 1.0] * 2
        last = hvd.join()
    everyone = hvd.allgather(torch.tensor([last]), name="join.last").tolist()
    assert everyone == [everyone[0]] * hvd.size() and everyone[0] != 0
    hvd.remove_process_set(active)
