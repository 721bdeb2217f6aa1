"""Programs that used to hang raise instead, on every rank (docs/runtime.md, "Deadlocks and
join"): auto-names that a join put out of step, a non-allreduce beside a joined rank, and
one-sided waits (each rank blocked on a request another never submits)."""

import os
import time

import pytest
import torch

import ronde.torch as hvd


def _with_env(name, value):
    """Restarts the runtime with the setting `name` (every rank does the same, in step)."""
    hvd.shutdown()
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    hvd.init()
    return old


@pytest.fixture
def quick_detector():
    # Deadlocks are found after the stall check time: short here, 60 s by default.
    old = _with_env("RONDE_STALL_CHECK_TIME_SECONDS", "0.5")
    yield
    _with_env("RONDE_STALL_CHECK_TIME_SECONDS", old)


def test_unnamed_calls_agree_after_a_join_that_a_rank_reached_early(quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    early = 1
    # The early rank makes one unnamed allreduce, the others three: while it waits in join,
    # their counters run ahead of its own.
    steps = 1 if hvd.rank() == early else 3
    for step in range(steps):
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
        active = hvd.size() - (1 if step >= 1 else 0)
        assert out.tolist() == [float(active)] * 2, (step, out)
    assert hvd.join() in range(hvd.size())
    # After the join every rank numbers unnamed calls in step again (before the fix these
    # names differed between ranks: a hang, here a deadlock error).
    for _ in range(2):
        out = hvd.allreduce(torch.full((2,), float(hvd.rank())), op=hvd.Sum)
        assert out.tolist() == [float(sum(range(hvd.size())))] * 2
        gathered = hvd.allgather(torch.tensor([hvd.rank()]))
        assert gathered.tolist() == list(range(hvd.size()))


def test_an_allgather_beside_a_joined_rank_raises_on_every_active_rank(quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    if hvd.rank() == 1:
        hvd.join()
    else:
        with pytest.raises(hvd.RondeError, match="joined"):
            hvd.allgather(torch.tensor([hvd.rank()]))
        hvd.join()
    # And the runtime runs on, names in step.
    assert hvd.allgather(torch.tensor([hvd.rank()])).tolist() == list(range(hvd.size()))


def test_one_sided_waits_raise_on_every_rank(quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    with pytest.raises(hvd.MismatchError) as caught:
        if hvd.rank() == 0:
            hvd.barrier()
        else:
            hvd.allreduce(torch.ones(3), name="grad.3")
    message = str(caught.value)
    assert "deadlock" in message
    assert "rank 0 waits in barrier" in message
    for r in range(1, hvd.size()):
        assert ("rank %d waits for allreduce 'allreduce.grad.3', which rank 0 never submitted"
                % r) in message, message
    # Every rank keeps a working runtime, the names free again. (Automatic names are not in
    # step now: rank 0 counted a barrier the others did not; hence named calls here.)
    out = hvd.allreduce(torch.ones(3), name="grad.3", op=hvd.Sum)
    assert out.tolist() == [float(hvd.size())] * 3


def test_a_rank_that_computes_is_not_deadlocked(quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    last = hvd.size() - 1
    if hvd.rank() == last:
        # A request pending, nobody waiting on it: this rank is busy, not blocked.
        later = hvd.allreduce_async(torch.ones(1), name="later", op=hvd.Sum)
        time.sleep(2.5)  # five detection times
        first = hvd.allreduce(torch.ones(1), name="first", op=hvd.Sum)
        second = hvd.synchronize(later)
    else:
        first = hvd.allreduce(torch.ones(1), name="first", op=hvd.Sum)
        second = hvd.allreduce(torch.ones(1), name="later", op=hvd.Sum)
    assert first.item() == hvd.size() and second.item() == hvd.size()


def test_a_duplicate_in_flight_name_raises_on_every_rank_that_submitted_it():
    if hvd.size() < 2:
        pytest.skip("needs a peer to hold rank 0's first request back")
    # Rank 0 submits the name twice before its first can complete (the others submit their
    # first only after rank 0's barrier): it refuses at once. In odd rounds the others submit
    # their second once their first completed, so they accept it (the case that hung); in even
    # rounds at once (refused, or accepted as the race goes). Every second raises, never waits.
    for round_ in range(5):
        name = "dup.%d" % round_
        first = None
        if hvd.rank() == 0:
            first = hvd.allreduce_async(torch.ones(2), name=name, op=hvd.Sum)
            with pytest.raises(hvd.RondeError, match="in flight"):
                hvd.allreduce_async(torch.ones(2), name=name, op=hvd.Sum)
            hvd.barrier()
        else:
            hvd.barrier()
            first = hvd.allreduce_async(torch.ones(2), name=name, op=hvd.Sum)
            if round_ % 2:
                while not hvd.poll(first):
                    time.sleep(0.001)
            with pytest.raises(hvd.RondeError, match="in flight"):
                hvd.synchronize(hvd.allreduce_async(torch.ones(2), name=name, op=hvd.Sum))
        assert hvd.synchronize(first).tolist() == [float(hvd.size())] * 2
