"""The typed request of ronde._core (Request with RequestKind / ReduceOp enums) and the one-call
path of the in-place allreduce: fields read back as set, results against closed forms, bad
arguments refused before anything is enqueued."""

import pytest
import torch

import ronde.torch as hvd
from ronde import _core
from ronde.torch import mpi_ops


def _ref(t):
    return _core.TensorRef(t, t.data_ptr(), 7, tuple(t.shape))  # 7: float32


def _rank_sum(n):
    """Sum over ranks r of (r + 1) * 10 + i, at element i."""
    size = hvd.size()
    return torch.tensor([10.0 * size * (size + 1) / 2 + size * i for i in range(n)])


def _filled(n):
    return torch.tensor([(hvd.rank() + 1) * 10.0 + i for i in range(n)])


def test_request_fields_read_back_as_set():
    t = torch.zeros(3)
    ref = _ref(t)
    r = _core.Request(_core.RequestKind.BROADCAST, "req.fields", ref, ref, _core.ReduceOp.MAX,
                      0.5, 2.0, 0, 1, [1, 2])
    assert r.kind == _core.RequestKind.BROADCAST
    assert r.name == "req.fields"
    assert r.input.owner is t and r.output.owner is t
    assert r.op == _core.ReduceOp.MAX
    assert (r.prescale, r.postscale, r.process_set, r.root) == (0.5, 2.0, 0, 1)
    assert r.splits == [1, 2]
    assert r.allocator is False
    r.allocator = lambda shape: _ref(torch.empty(shape))
    assert r.allocator is True
    r.name = "renamed"
    r.op = _core.ReduceOp.SUM
    assert (r.name, r.op) == ("renamed", _core.ReduceOp.SUM)
    bare = _core.Request(_core.RequestKind.BARRIER, "req.bare")
    assert bare.input is None and bare.op == _core.ReduceOp.SUM and bare.splits == []
    with pytest.raises(TypeError):
        _core.Request(_core.RequestKind.ALLREDUCE, "req.bad", ref, ref, 1)  # op must be a ReduceOp


def test_typed_request_allreduce_and_group():
    t = _filled(5)
    handle = _core.enqueue(_core.Request(_core.RequestKind.ALLREDUCE, "req.one", _ref(t), _ref(t),
                                         _core.ReduceOp.SUM, 1.0, 3.0))
    handle.wait(30)
    assert torch.equal(t, 3 * _rank_sum(5))
    a, b = _filled(4), _filled(7)
    requests = [_core.Request(_core.RequestKind.ALLREDUCE, "req.group.%d" % i, _ref(x), _ref(x),
                              _core.ReduceOp.AVERAGE) for i, x in enumerate((a, b))]
    for h in _core.enqueue_group(requests):
        h.wait(30)
    assert torch.equal(a, _rank_sum(4) / hvd.size())
    assert torch.equal(b, _rank_sum(7) / hvd.size())


def test_a_request_object_can_be_reused_after_it_completes():
    t = _filled(2)
    request = _core.Request(_core.RequestKind.ALLREDUCE, "req.reused", _ref(t), _ref(t))
    _core.enqueue(request).wait(30)
    expected = _rank_sum(2)
    assert torch.equal(t, expected)
    t.copy_(_filled(2))
    _core.enqueue(request).wait(30)  # the runtime took a copy: the object is unchanged
    assert torch.equal(t, expected)


def test_in_place_allreduce_one_call_path_matches_the_closed_form():
    t = _filled(6)
    strided = torch.stack([_filled(6), torch.zeros(6)], dim=1)[:, 0]  # not contiguous
    assert not strided.is_contiguous()
    h1 = hvd.allreduce_async_(t, name="req.fast", op=hvd.Sum, prescale_factor=2,
                              postscale_factor=0.5)
    h2 = hvd.allreduce_async_(strided, name="req.strided", op=hvd.Max)
    assert hvd.synchronize(h1) is t
    assert torch.equal(t, _rank_sum(6))
    top = torch.tensor([hvd.size() * 10.0 + i for i in range(6)])
    assert torch.equal(hvd.synchronize(h2), top)
    assert torch.equal(strided, top)


@pytest.mark.parametrize("position,value,message", [
    (2, 99, "dtype code"),
    (5, b"bytes", "name must be a str"),
    (6, 42, "reduction op code"),
    (7, "x", "prescale must be a number"),
    (3, (2, "a"), "dimension must be an integer"),
])
def test_in_place_allreduce_one_call_path_refuses_bad_arguments(position, value, message):
    t = torch.ones(2)
    args = [t, t.data_ptr(), 7, t.shape, -1, "req.refused", 0, 1.0, 1.0, 0]
    args[position] = value
    with pytest.raises(ValueError, match=message):
        _core.enqueue_allreduce_(*args)
    # Nothing was left in flight under that name.
    hvd.synchronize(hvd.allreduce_async_(t, name="req.refused"))


def test_op_codes_of_the_one_call_path_follow_the_enum():
    assert mpi_ops._CORE_OP_CODES == {op: int(core) for op, core in mpi_ops._CORE_OPS.items()}
    assert int(_core.ReduceOp.SUM) == 0 and int(_core.ReduceOp.PRODUCT) == 4
