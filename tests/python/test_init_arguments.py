"""hvd.init's arguments as Horovod documents them: process_sets="dynamic" (no sets now,
add_process_set later; before, ronde read "dynamic" as a list and failed on
'str'.process_set_id), and comm as a list of ranks (before, any list was refused as "an MPI
communicator"). ronde's world is every rank of the job: that list in order is accepted, a
subset is refused alike on every rank, and anything that is not a list of ranks is refused.
Each test shuts the runtime down and starts it again on every rank, in step."""

import pytest
import torch

import ronde.torch as hvd


def _restart(**kwargs):
    hvd.shutdown()
    hvd.init(**kwargs)


def _sum_of_ranks(process_set=hvd.global_process_set):
    out = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum, process_set=process_set)
    return out.item()


def test_dynamic_process_sets():
    _restart(process_sets="dynamic")
    assert hvd.is_initialized()
    if hvd.size() > 1:  # alone, the evens are the global set, and a duplicate is refused
        evens = hvd.add_process_set(list(range(0, hvd.size(), 2)))
        if evens.included():
            assert _sum_of_ranks(evens) == float(sum(range(0, hvd.size(), 2)))
        assert hvd.remove_process_set(evens)
    assert _sum_of_ranks() == float(sum(range(hvd.size())))


def test_dynamic_is_case_insensitive_and_other_strings_are_refused():
    _restart(process_sets="DYNAMIC")
    assert hvd.is_initialized()
    hvd.shutdown()
    with pytest.raises(ValueError, match="dynamic"):
        hvd.init(process_sets="static")
    hvd.init()


def test_comm_of_every_rank_is_the_whole_job():
    _restart(comm=list(range(hvd.size())))
    assert hvd.size() >= 1
    assert _sum_of_ranks() == float(sum(range(hvd.size())))
    _restart(comm=tuple(range(hvd.size())))
    assert _sum_of_ranks() == float(sum(range(hvd.size())))


def test_comm_of_some_ranks_is_refused_on_every_rank():
    if hvd.size() == 1:
        pytest.skip("a proper subset needs two ranks")
    hvd.shutdown()
    with pytest.raises(NotImplementedError, match=r"ProcessSet\(\[0\]\)"):
        hvd.init(comm=[0])
    assert not hvd.is_initialized()
    hvd.init()
    assert _sum_of_ranks() == float(sum(range(hvd.size())))


@pytest.mark.parametrize("comm, words", [
    ([0, 0], "twice"),
    ([0, -1], "non-negative"),
    ([0, 1.5], "integers"),
    (object(), "MPI communicator"),
    ("0,1", "MPI communicator"),
])
def test_comm_that_is_not_a_list_of_ranks_is_refused(comm, words):
    hvd.shutdown()
    with pytest.raises(ValueError, match=words):
        hvd.init(comm=comm)
    hvd.init()
    assert _sum_of_ranks() == float(sum(range(hvd.size())))
