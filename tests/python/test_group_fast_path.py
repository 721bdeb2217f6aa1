"""The one-call paths of grouped allreduce, allgather and reducescatter and of single
allgather_async and reducescatter_async (ronde._core.HandleTable.group_ and submit_, which
read host tensors themselves and adopt the outputs ronde makes) against the general path (a
typed Request per tensor through _core.enqueue_group) and against closed forms computed here:
every dtype, ops, scaling, uneven and empty shares, non-contiguous inputs, names, process
sets, the cases the fast path must decline, and errors."""

import pytest
import torch

import ronde.torch as hvd
from ronde import _core
from ronde.torch import mpi_ops, submission

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def _values(rank, shape, dtype, salt=0):
    """Rank `rank`'s tensor: small integers that no dtype rounds, different on every rank."""
    count = 1
    for d in shape:
        count *= d
    return ((torch.arange(count) + salt) % 3 + rank + 1).reshape(shape).to(dtype)


def _reduce(stacked, op):
    if op == hvd.Sum:
        return stacked.sum(0)
    if op == hvd.Average:
        return stacked.sum(0) / stacked.shape[0]
    if op == hvd.Min:
        return stacked.min(0).values
    if op == hvd.Max:
        return stacked.max(0).values
    return stacked.prod(0)


def _share(rows, size, rank):
    """This rank's (first row, row count) of a reducescatter: the first rows % size ranks get
    one extra row."""
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    return sum(counts[:rank]), counts[rank]


def _general_group(kind, tensors, group_name, op=hvd.Sum, prescale=1.0, postscale=1.0,
                   outputs=None):
    """The same group through the general path, member by member, as before the fast path."""
    specs = []
    for i, t in enumerate(tensors):
        name = "%s.%d" % (group_name, i)
        if kind == mpi_ops._ALLREDUCE:
            target = t if outputs is None else outputs[i]
            specs.append(mpi_ops._spec(kind, name, t, target, op=op, prescale=prescale,
                                       postscale=postscale))
        else:
            specs.append(mpi_ops._spec(kind, name, t, allocate=mpi_ops._allocator(t), op=op,
                                       prescale=prescale, postscale=postscale))
    cores = _core.enqueue_group(specs)
    for core in cores:
        core.wait()
    if kind == mpi_ops._ALLREDUCE:
        return list(tensors) if outputs is None else outputs
    return [submission._output(c) for c in cores]


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allgather_matches_the_general_path_and_the_closed_form(dtype):
    size, rank = hvd.size(), hvd.rank()
    # Member i: rank r sends r + 1 + i % 2 rows (uneven), a scalar-row vector, and none.
    shapes = lambda r: [(r + 1, 3), (r + 2, 2, 2), (r + 1,), (0, 4)]  # noqa: E731
    mine = [_values(rank, s, dtype, i) for i, s in enumerate(shapes(rank))]
    handle = submission._submit_group(submission._ALLGATHER_CODE, mine, None,
                                      "fastgather.%s" % dtype, 0, 1.0, 1.0,
                                      hvd.global_process_set)
    assert isinstance(handle, int)  # host tensors take the fast path
    fast = hvd.synchronize(handle)
    general = _general_group(mpi_ops._ALLGATHER, mine, "generalgather.%s" % dtype)
    public = hvd.grouped_allgather(mine, name="publicgather.%s" % dtype)
    for i, (f, g, p) in enumerate(zip(fast, general, public)):
        expected = torch.cat([_values(r, shapes(r)[i], dtype, i) for r in range(size)])
        assert f.dtype == dtype and f.shape == expected.shape
        assert torch.equal(f, expected) and torch.equal(g, expected) and torch.equal(p, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Max, hvd.Min])
def test_grouped_reducescatter_matches_the_general_path_and_the_closed_form(dtype, op):
    size, rank = hvd.size(), hvd.rank()
    # Uneven rows, rows fewer than ranks (some shares empty), 1-D, and an empty tensor.
    shapes = [(2 * size + 1, 3), (max(size - 1, 1), 2), (3 * size,), (0, 2)]
    mine = [_values(rank, s, dtype, i) for i, s in enumerate(shapes)]
    fast = hvd.synchronize(submission._submit_group(
        submission._REDUCESCATTER_CODE, mine, None, "fastscatter.%s.%s" % (dtype, op),
        submission._CORE_OP_CODES[op], 1.0, 1.0, hvd.global_process_set))
    general = _general_group(mpi_ops._REDUCESCATTER, mine, "generalscatter.%s.%s" % (dtype, op),
                             op=op)
    for i, (f, g) in enumerate(zip(fast, general)):
        full = _reduce(torch.stack([_values(r, shapes[i], torch.float64, i).to(dtype).double()
                                    for r in range(size)]), op).to(dtype)
        first, count = _share(shapes[i][0], size, rank)
        expected = full.narrow(0, first, count)
        assert f.dtype == dtype and f.shape == expected.shape
        assert torch.equal(f, expected) and torch.equal(g, expected)


def test_grouped_reducescatter_average_and_scaling():
    size, rank = hvd.size(), hvd.rank()
    mine = [_values(rank, (2 * size, 2), torch.float64, i) for i in range(3)]
    outs = hvd.grouped_reducescatter(mine, name="scaledscatter", op=hvd.Average,
                                     prescale_factor=2.0, postscale_factor=0.25)
    for i, out in enumerate(outs):
        full = torch.stack([_values(r, (2 * size, 2), torch.float64, i)
                            for r in range(size)]).sum(0) * 2.0 / size * 0.25
        assert torch.equal(out, full[2 * rank:2 * rank + 2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allreduce_in_place_and_into_outputs(dtype):
    size, rank = hvd.size(), hvd.rank()
    shapes = [(3,), (2, 3), (), (0,)]
    expected = [torch.stack([_values(r, s, dtype, i).double() for r in range(size)]).sum(0)
                .to(dtype) for i, s in enumerate(shapes)]
    in_place = [_values(rank, s, dtype, i) for i, s in enumerate(shapes)]
    results = hvd.grouped_allreduce_(in_place, name="inplace.%s" % dtype, op=hvd.Sum)
    assert all(r is t for r, t in zip(results, in_place))
    sources = [_values(rank, s, dtype, i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(sources, name="outofplace.%s" % dtype, op=hvd.Sum)
    general = _general_group(mpi_ops._ALLREDUCE,
                             [_values(rank, s, dtype, i) for i, s in enumerate(shapes)],
                             "generalreduce.%s" % dtype)
    for i in range(len(shapes)):
        assert torch.equal(in_place[i], expected[i]) and torch.equal(outs[i], expected[i])
        assert torch.equal(general[i], expected[i])
        assert torch.equal(sources[i], _values(rank, shapes[i], dtype, i))  # left as it was


def test_single_allgather_and_reducescatter_take_the_fast_path():
    size, rank = hvd.size(), hvd.rank()
    t = _values(rank, (rank + 1, 2), torch.int32)
    handle = submission._submit_one(submission._ALLGATHER_CODE, t, "single.gather", 0, 1.0, 1.0,
                                    hvd.global_process_set)
    assert isinstance(handle, int)
    gathered = hvd.synchronize(handle)
    assert torch.equal(gathered, torch.cat([_values(r, (r + 1, 2), torch.int32)
                                            for r in range(size)]))
    s = _values(rank, (2 * size + 1,), torch.float32)
    scattered = hvd.synchronize(hvd.reducescatter_async(s, name="single.scatter", op=hvd.Sum))
    first, count = _share(2 * size + 1, size, rank)
    full = torch.stack([_values(r, (2 * size + 1,), torch.float32) for r in range(size)]).sum(0)
    assert torch.equal(scattered, full.narrow(0, first, count))


def test_non_contiguous_inputs():
    size, rank = hvd.size(), hvd.rank()
    base = _values(rank, (3, 2 * size), torch.float32)
    view = base.t()  # (2 * size, 3), not contiguous
    assert not view.is_contiguous()
    gathered, scattered = (hvd.grouped_allgather([view], name="strided.gather")[0],
                           hvd.grouped_reducescatter([view], name="strided.scatter",
                                                     op=hvd.Sum)[0])
    views = [_values(r, (3, 2 * size), torch.float32).t() for r in range(size)]
    assert torch.equal(gathered, torch.cat(views))
    assert torch.equal(scattered, torch.stack(views).sum(0)[2 * rank:2 * rank + 2])
    # In place, a non-contiguous member sends the whole group down the general path, which
    # reduces a contiguous copy and writes it back.
    other = _values(rank, (4,), torch.float32)
    assert submission._submit_group(submission._ALLREDUCE_CODE, [other, view], None, "unused",
                                    0, 1.0, 1.0, hvd.global_process_set) is None
    results = hvd.grouped_allreduce_([other, view], name="strided.inplace", op=hvd.Sum)
    assert results[0] is other and results[1] is view
    assert torch.equal(view, torch.stack(views).sum(0))
    assert torch.equal(base, torch.stack(views).sum(0).t())


def test_bool_members_take_the_general_path_with_the_same_names():
    # Bool outputs need torch's allocator (torch 1.13's DLPack has no bool): the fast path
    # declines the group before submitting anything or using up a number.
    flags = [torch.tensor([hvd.rank() % 2 == 0, True]), torch.ones(2)]
    before = mpi_ops._next_number("grouped_allgather")
    assert submission._submit_group(submission._ALLGATHER_CODE, flags, None, "declined", 0,
                                    1.0, 1.0, hvd.global_process_set) is None
    assert mpi_ops._next_number("grouped_allgather") == before + 1  # only this call's number
    outs = hvd.grouped_allgather(flags)  # unnamed: grouped_allgather.noname.<before + 2>
    assert mpi_ops._next_number("grouped_allgather") == before + 3  # numbered once
    assert outs[0].dtype == torch.bool
    assert outs[0].tolist() == [v for r in range(hvd.size()) for v in (r % 2 == 0, True)]
    assert outs[1].tolist() == [1.0] * 2 * hvd.size()


def test_member_names_are_the_general_paths():
    # Rank 0's fast-path group stays in flight until the others submit theirs, after the
    # barrier: a general-path request named as its second member must be refused.
    if hvd.size() < 2:
        pytest.skip("needs a peer that has not submitted yet")
    tensors = [torch.ones(2), torch.ones(3)]
    if hvd.rank() == 0:
        handle = hvd.grouped_allgather_async(tensors, name="clash")
        clash = mpi_ops._spec(mpi_ops._ALLGATHER, "grouped_allgather.clash.1", torch.ones(1),
                              allocate=mpi_ops._allocator(torch.ones(1)))
        with pytest.raises(hvd.RondeError, match="already in flight on rank 0"):
            _core.enqueue(clash)
        hvd.barrier()
    else:
        hvd.barrier()
        handle = hvd.grouped_allgather_async(tensors, name="clash")
    outs = hvd.synchronize(handle)
    assert [o.tolist() for o in outs] == [[1.0] * 2 * hvd.size(), [1.0] * 3 * hvd.size()]


def test_process_set_and_a_removed_one():
    if hvd.size() < 2:
        pytest.skip("a set besides the global one needs two ranks (a duplicate is refused)")
    members = list(range(hvd.size() - 1))
    some = hvd.add_process_set(members)
    try:
        if some.included():
            outs = hvd.grouped_reducescatter([torch.ones(len(members), 2)], name="set.scatter",
                                             op=hvd.Sum, process_set=some)
            assert outs[0].tolist() == [[float(len(members))] * 2]
            gathered = hvd.allgather(torch.tensor([hvd.rank()]), process_set=some)
            assert gathered.tolist() == members
    finally:
        hvd.remove_process_set(some)
    with pytest.raises(ValueError, match="is not registered"):
        hvd.grouped_allgather_async([torch.ones(1)], name="removed", process_set=some)
    hvd.synchronize(hvd.grouped_allgather_async([torch.ones(1)], name="removed"))  # name free


def test_outputs_are_independent_writable_and_keep_their_values():
    n = hvd.size()
    outs = hvd.grouped_allgather([torch.full((2,), float(hvd.rank())) for _ in range(20)],
                                 name="independent")
    for i, out in enumerate(outs):
        out.add_(i)  # each output owns its memory: writing one leaves the others alone
    hvd.grouped_allgather([torch.zeros(5) for _ in range(20)], name="independent.later")
    for i, out in enumerate(outs):
        assert out.tolist() == [float(r + i) for r in range(n) for _ in range(2)]
        assert out.data_ptr() % 64 == 0


def test_a_mismatched_member_fails_synchronize_and_leaves_no_handle():
    if hvd.size() < 2:
        pytest.skip("needs ranks that disagree")
    # Rank 0's second member has another dtype than its peers': the runtime fails that member
    # on every rank, and the group's synchronize raises it.
    dtype = torch.float64 if hvd.rank() == 0 else torch.float32
    handle = hvd.grouped_allgather_async([torch.ones(2), torch.ones(2, dtype=dtype)],
                                         name="mismatch")
    with pytest.raises(hvd.RondeError):
        hvd.synchronize(handle)
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(handle)


def test_the_table_checks_the_group_arguments():
    table = _core.HandleTable({torch.float32: 7}, mpi_ops._name)
    ps = hvd.global_process_set
    with pytest.raises(TypeError, match=r"group_\(\) takes 8 arguments \(3 given\)"):
        table.group_(0, [], None)
    with pytest.raises(TypeError, match="tensors must be a list or tuple"):
        table.group_(0, 5, None, "g", 0, 1.0, 1.0, ps)
    with pytest.raises(ValueError, match="as many outputs as tensors"):
        table.group_(0, [torch.ones(1)], [], "g", 0, 1.0, 1.0, ps)
    with pytest.raises(ValueError, match="only an allreduce group takes outputs"):
        table.group_(1, [torch.ones(1)], [torch.ones(1)], "g", 0, 1.0, 1.0, ps)
    with pytest.raises(ValueError, match="not request kind 2"):
        table.submit_(2, torch.ones(1), "b", 0, 1.0, 1.0, ps)
    with pytest.raises(ValueError, match="does not support tensors of dtype torch.float64"):
        table.group_(1, [torch.ones(1, dtype=torch.float64)], None, "g", 0, 1.0, 1.0, ps)
    # Without an adopter, synchronize hands over the DLPack capsules themselves.
    capsules = table.synchronize(table.group_(1, [torch.ones(1)], None, "capsules", 0, 1.0,
                                              1.0, ps))
    assert [type(c).__name__ for c in capsules] == ["PyCapsule"]
    assert torch.utils.dlpack.from_dlpack(capsules[0]).tolist() == [1.0] * hvd.size()
    # An empty group completes at once with no results.
    assert table.synchronize(table.group_(4, [], None, "empty", 0, 1.0, 1.0, ps)) == []
