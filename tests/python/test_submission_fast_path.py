"""allreduce_async_'s one-call path (ronde._core.HandleTable.allreduce_, which reads the torch
tensor itself) against the general path (a typed Request through _core.enqueue) and against
closed forms: same results for every dtype, op, scaling, shape, name and process set; the
same errors; the same handle behaviour (poll, synchronize, unknown handles)."""

import time

import pytest
import torch

import ronde.torch as hvd
from ronde import _core
from ronde.torch import mpi_ops


def _general_allreduce_(tensor, name, op, prescale=1.0, postscale=1.0,
                        process_set=hvd.global_process_set):
    """The in-place allreduce through the general path: a Request made field by field."""
    request = mpi_ops._spec(mpi_ops._ALLREDUCE, "allreduce." + name, tensor, tensor, op=op,
                            prescale=prescale, postscale=postscale, process_set=process_set)
    _core.enqueue(request).wait()
    return tensor


def _contribution(dtype, shape):
    """Rank r's tensor: small values that no dtype rounds, different on every rank."""
    count = 1
    for d in shape:
        count *= d
    values = (torch.arange(count) % 3 + hvd.rank() + 1).reshape(shape)
    return values.to(dtype)


def _closed_form(dtype, shape, op, prescale=1.0, postscale=1.0, members=None):
    members = list(range(hvd.size())) if members is None else members
    ranks = [(_contribution_for(r, dtype, shape).double() * prescale) for r in members]
    stacked = torch.stack(ranks)
    if op == hvd.Sum:
        out = stacked.sum(0)
    elif op == hvd.Average:
        out = stacked.sum(0) / len(members)
    elif op == hvd.Min:
        out = stacked.min(0).values
    elif op == hvd.Max:
        out = stacked.max(0).values
    else:
        out = stacked.prod(0)
    return (out * postscale).to(dtype)


def _contribution_for(rank, dtype, shape):
    count = 1
    for d in shape:
        count *= d
    return (torch.arange(count) % 3 + rank + 1).reshape(shape).to(dtype)


CASES = [
    (torch.float32, (5,), hvd.Sum), (torch.float32, (2, 3), hvd.Average),
    (torch.float64, (4,), hvd.Max), (torch.int32, (3, 1, 2), hvd.Min),
    (torch.int64, (), hvd.Sum), (torch.float16, (6,), hvd.Product),
    (torch.bfloat16, (4,), hvd.Sum), (torch.uint8, (3,), hvd.Max), (torch.int8, (2,), hvd.Sum),
]


@pytest.mark.parametrize("dtype,shape,op", CASES)
def test_fast_path_matches_the_general_path_and_the_closed_form(dtype, shape, op):
    fast = _contribution(dtype, shape)
    general = _contribution(dtype, shape)
    handle = hvd.allreduce_async_(fast, name="fast.%s.%s" % (dtype, op), op=op)
    assert isinstance(handle, int)
    assert hvd.synchronize(handle) is fast
    _general_allreduce_(general, "general.%s.%s" % (dtype, op), op)
    assert fast.dtype == dtype and tuple(fast.shape) == shape
    assert torch.equal(fast, general)
    assert torch.equal(fast, _closed_form(dtype, shape, op))


def test_scaling_and_the_deprecated_average_flag():
    fast = _contribution(torch.float64, (4,))
    general = _contribution(torch.float64, (4,))
    hvd.synchronize(hvd.allreduce_async_(fast, name="fast.scaled", op=hvd.Sum,
                                         prescale_factor=2, postscale_factor=0.25))
    _general_allreduce_(general, "general.scaled", hvd.Sum, 2.0, 0.25)
    assert torch.equal(fast, general)
    assert torch.equal(fast, _closed_form(torch.float64, (4,), hvd.Sum, 2.0, 0.25))
    flagged = _contribution(torch.float32, (3,))
    with pytest.warns(DeprecationWarning):
        hvd.synchronize(hvd.allreduce_async_(flagged, average=False, name="fast.flag"))
    assert torch.equal(flagged, _closed_form(torch.float32, (3,), hvd.Sum))


def test_non_contiguous_tensor_is_written_back():
    base = torch.stack([_contribution(torch.float32, (3,))] * 2, dim=1)  # (3, 2)
    view = base.t()  # (2, 3), not contiguous
    assert not view.is_contiguous()
    out = hvd.synchronize(hvd.allreduce_async_(view, name="fast.strided", op=hvd.Sum))
    assert out is view
    expected = _closed_form(torch.float32, (3,), hvd.Sum)
    assert torch.equal(view, torch.stack([expected, expected]))
    assert torch.equal(base[:, 0], expected) and torch.equal(base[:, 1], expected)


def test_unnamed_requests_share_the_numbering_of_the_other_allreduces():
    # Unnamed fast-path requests take the next allreduce.noname.<n>, as the out-of-place
    # allreduce does: a rank mixing them agrees with peers that mix them the same way.
    before = mpi_ops._next_number("allreduce")
    t = _contribution(torch.float32, (2,))
    hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum))
    hvd.synchronize(hvd.allreduce_async(t.clone(), op=hvd.Sum))
    hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum))
    assert mpi_ops._next_number("allreduce") == before + 4  # 3 requests, then this call
    # A name that is not a str is formatted as before ("allreduce.7").
    n = torch.ones(1)
    hvd.synchronize(hvd.allreduce_async_(n, name=7, op=hvd.Sum))
    assert n.item() == hvd.size()


def test_process_set_of_all_ranks_but_the_last():
    # (Not every rank: that set is the global one, and Horovod refuses a duplicate.)
    if hvd.size() < 2:
        pytest.skip("a set besides the global one needs two ranks")
    members = list(range(hvd.size() - 1))
    some = hvd.add_process_set(members)
    try:
        if some.included():
            fast = _contribution(torch.float32, (3,))
            hvd.synchronize(hvd.allreduce_async_(fast, op=hvd.Sum, process_set=some))
            named = _contribution(torch.float32, (3,))
            hvd.synchronize(hvd.allreduce_async_(named, name="fast.set", op=hvd.Max,
                                                 process_set=some))
            assert torch.equal(fast, _closed_form(torch.float32, (3,), hvd.Sum, members=members))
            assert torch.equal(named, _closed_form(torch.float32, (3,), hvd.Max, members=members))
    finally:
        hvd.remove_process_set(some)


def test_the_same_errors_as_the_general_path():
    with pytest.raises(ValueError, match="does not support tensors of dtype torch.complex64"):
        hvd.allreduce_async_(torch.ones(2, dtype=torch.complex64), name="fast.complex")
    with pytest.raises(ValueError, match="op parameter supersedes average"):
        hvd.allreduce_async_(torch.ones(2), average=True, op=hvd.Sum, name="fast.both")
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce_async_(torch.ones(2), op=17, name="fast.op")
    with pytest.raises(ValueError, match="prescale must be a number"):
        hvd.allreduce_async_(torch.ones(2), prescale_factor="x", name="fast.scale")
    names = ["fast.complex", "fast.both", "fast.op", "fast.scale"]
    if hvd.size() > 1:  # a set besides the global one (a duplicate of it is refused)
        removed = hvd.add_process_set([0])
        hvd.remove_process_set(removed)
        with pytest.raises(ValueError, match="is not registered"):
            hvd.allreduce_async_(torch.ones(2), name="fast.removed", process_set=removed)
        names.append("fast.removed")
    # Nothing refused above was left in flight: the names are free again.
    for name in names:
        hvd.synchronize(hvd.allreduce_async_(torch.ones(1), name=name))


def test_a_name_in_flight_is_refused_naming_the_rank():
    if hvd.size() < 2:
        pytest.skip("needs a peer that has not submitted yet")
    # Rank 0's request stays in flight until the others submit theirs, after the barrier.
    t = torch.ones(2)
    if hvd.rank() == 0:
        first = hvd.allreduce_async_(t, name="fast.twice", op=hvd.Sum)
        with pytest.raises(hvd.RondeError, match="already in flight on rank 0"):
            hvd.allreduce_async_(torch.ones(2), name="fast.twice", op=hvd.Sum)
        hvd.barrier()
    else:
        hvd.barrier()
        first = hvd.allreduce_async_(t, name="fast.twice", op=hvd.Sum)
    assert hvd.synchronize(first) is t and t.tolist() == [float(hvd.size())] * 2


def test_handles_poll_synchronize_and_unknown_handles():
    t = torch.ones(3)
    handle = hvd.allreduce_async_(t, name="fast.poll", op=hvd.Sum)
    assert hvd.synchronize(handle) is t
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(handle)  # already synchronized
    assert hvd.synchronize(handle) is None
    assert hvd.synchronize(123456789) is None
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll("nonsense")
    later = hvd.allreduce_async_(torch.ones(1), name="fast.later")
    assert later > handle  # numbers only grow
    deadline = time.monotonic() + 60
    while not hvd.poll(later):
        assert time.monotonic() < deadline, "fast.later still pending after 60 s"
        time.sleep(0.001)
    assert hvd.synchronize(later).tolist() == [1.0]
    # Group handles (Python objects) go through the same table.
    outs = hvd.synchronize(hvd.grouped_allreduce_async_([torch.ones(1), torch.ones(2)],
                                                        name="fast.group", op=hvd.Sum))
    assert [o.tolist() for o in outs] == [[float(hvd.size())], [float(hvd.size())] * 2]


def test_a_failed_request_raises_from_synchronize_and_leaves_no_handle():
    # Ranks disagree on the op: the runtime fails the request on every rank.
    t = torch.ones(2)
    handle = hvd.allreduce_async_(t, name="fast.mismatch",
                                  op=hvd.Sum if hvd.rank() == 0 else hvd.Max)
    if hvd.size() == 1:
        hvd.synchronize(handle)
        return
    with pytest.raises(hvd.RondeError):
        hvd.synchronize(handle)
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(handle)


def test_the_table_is_made_by_its_factory_and_checks_its_arguments():
    # A plain CPython type (no pybind11 dispatcher): it must refuse what pybind11 refused.
    table = _core.HandleTable({torch.float32: 7}, mpi_ops._name)
    assert type(table).__name__ == "HandleTable" and len(table) == 0
    with pytest.raises(TypeError, match="cannot create"):
        type(table)()
    with pytest.raises(TypeError, match=r"allreduce_\(\) takes 6 arguments \(2 given\)"):
        table.allreduce_(torch.ones(1), "x")
    with pytest.raises(TypeError, match=r"add\(\) takes 2 to 3 arguments \(1 given\)"):
        table.add(None)
    with pytest.raises(ValueError, match="does not support tensors of dtype torch.float64"):
        table.allreduce_(torch.ones(1, dtype=torch.float64), "x", 0, 1.0, 1.0,
                         hvd.global_process_set)
    handle = table.add(_Done(), None, "value")
    assert len(table) == 1 and table.poll(handle) is True
    assert table.synchronize(handle) == "value" and len(table) == 0
    table.add(_Done(), None)
    table.clear()
    assert len(table) == 0


class _Done:
    """A finished waitable, as group handles are."""

    def poll(self):
        return True

    def wait(self):
        pass
