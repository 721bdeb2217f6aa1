"""hvd.elastic.TorchState's sync outside an elastic job: which rank's sampler position a new
world takes. (The end-to-end elastic tests are tests/elastic/.)"""

import pytest
import torch

import ronde.torch as hvd


def sampler_state():
    dataset = torch.utils.data.TensorDataset(torch.arange(64.0))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=False)
    return sampler, hvd.elastic.TorchState(sampler=sampler, step=0)


def first_batches(batches, batch_size=4):
    """The indices of the first `batches` batches of every rank (shuffle off: rank r takes
    every size-th sample from r)."""
    return set(range(batches * batch_size * hvd.size()))


def test_a_survivor_one_commit_ahead_does_not_skip_the_roots_samples():
    # Every rank commits batch 0; the last rank alone goes on and commits batch 1 too (its
    # allreduce completed before a peer's death broke it for the others). The new world takes
    # rank 0's state: step 1, and batch 1 still to be processed. The union of every rank's
    # processed samples would skip batch 1 of every rank.
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    sampler, state = sampler_state()
    sampler.record_batch(0, 4)
    state.step = 1
    state.commit()
    if hvd.rank() == hvd.size() - 1:
        sampler.record_batch(1, 4)
        state.step = 2
        state.commit()
    state.restore()
    state.sync()
    assert state.step == 1
    assert sampler.processed_indices == first_batches(1)


def test_ranks_that_record_only_their_own_samples_are_merged():
    # Horovod's sampler records only the local batch, and its sync takes the union.
    sampler, state = sampler_state()
    sampler.record_indices(set(sampler.get_indices(0, 4)))
    state.commit()
    state.sync()
    assert sampler.processed_indices == first_batches(1)


def test_elastic_run_raises_a_mismatch_instead_of_retrying_it_for_good():
    # A mismatch is a HorovodInternalError (as Horovod's synchronize raises it), but the ranks
    # disagreeing is the script's bug: hvd.elastic.run must raise it, not restore and repeat it.
    if hvd.size() < 2:
        pytest.skip("a mismatch needs two ranks")
    state = hvd.elastic.TorchState(step=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        hvd.allreduce(torch.ones(hvd.rank() + 1), name="elastic.mismatch")

    with pytest.raises(hvd.MismatchError, match="elastic.mismatch"):
        train(state)
    assert calls == [0]
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2
