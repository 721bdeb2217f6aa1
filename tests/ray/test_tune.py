"""ronde.ray.tune.DistributedTrainableCreator under Ray Tune on a head + 2-node
ray.cluster_utils.Cluster: two trials, each a 2-rank ronde job, whose reported losses and
final checkpoint match full-batch gradient descent computed here in one process; a rank that
raises fails its trial naming the rank; every trial's slots are free afterwards."""

import pickle
import sys
import time

import pytest

from ray import cloudpickle

from ronde.ray import DistributedTrainableCreator

cloudpickle.register_pickle_by_value(sys.modules[__name__])

STEPS = 4
ROWS = 64  # even: both ranks' shards have 32 rows, so their mean gradients average to the full one


def regression_data():
    import torch
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(ROWS, 4, generator=generator)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(
        ROWS, 1, generator=generator)
    return x, y


def initial_model():
    import torch
    torch.manual_seed(100)
    return torch.nn.Linear(4, 1)


def regression_trial(config):
    """Data-parallel linear regression: rank r trains on rows r, r+2, ..."""
    import torch
    import torch.nn.functional as F
    import ronde.torch as hvd
    from ronde.ray import tune as ronde_tune
    hvd.init()
    x, y = regression_data()
    model = initial_model() if hvd.rank() == 0 else torch.nn.Linear(4, 1)  # broadcast fixes it
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    mine = slice(hvd.rank(), None, hvd.size())
    for step in range(STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x[mine]), y[mine]).backward()
        optimizer.step()
        with torch.no_grad():
            loss = F.mse_loss(model(x), y).item()
        last = step == STEPS - 1
        ronde_tune.report({"loss": loss, "size": hvd.size(), "cross_size": hvd.cross_size()},
                          checkpoint={"weight": model.weight.detach().clone()} if last else None)
    hvd.shutdown()


def expected_losses(lr):
    """The same training on one process with the full batch."""
    import torch
    import torch.nn.functional as F
    x, y = regression_data()
    model = initial_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            losses.append(F.mse_loss(model(x), y).item())
    return losses, model.weight.detach().clone()


def wait_for_free_cpus(ray, count, timeout=30):
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= count


def tuner(trainable, param_space, path):
    from ray import tune
    return tune.Tuner(trainable, param_space=param_space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(storage_path=str(path), name="ronde", verbose=0))


def test_two_trials_of_two_ranks_report_the_full_batch_losses(ray_cluster, tmp_path):
    import ray
    import torch
    from ray import tune
    # Half a CPU per rank: both trials fit the two one-CPU nodes at once, one rank per node.
    trainable = DistributedTrainableCreator(regression_trial, num_workers=2, cpus_per_worker=0.5,
                                            placement_group_strategy="STRICT_SPREAD",
                                            timeout_s=60)
    results = tuner(trainable, {"lr": tune.grid_search([0.05, 0.2])}, tmp_path).fit()
    assert not results.errors
    assert sorted(r.config["lr"] for r in results) == [0.05, 0.2]
    for result in results:
        losses, weight = expected_losses(result.config["lr"])
        frame = result.metrics_dataframe
        assert list(frame["training_iteration"]) == list(range(1, STEPS + 1))
        assert list(frame["loss"]) == pytest.approx(losses, rel=1e-4)
        assert set(frame["size"]) == {2}
        assert set(frame["cross_size"]) == {2}  # one CPU per node: the ranks on two nodes
        with result.checkpoint.as_directory() as directory:
            with open(directory + "/ronde_checkpoint.pkl", "rb") as f:
                saved = pickle.load(f)
        assert torch.allclose(saved["weight"], weight, rtol=1e-4, atol=1e-6)
    best = min((0.05, 0.2), key=lambda lr: expected_losses(lr)[0][-1])
    assert results.get_best_result().config["lr"] == best
    wait_for_free_cpus(ray, 2)


def failing_or_endless_trial(config):
    """bad_rank set: that rank raises while the other waits in a collective. Unset: reports
    forever, until Tune's stop criterion ends the trial."""
    import os
    import torch
    import ronde.torch as hvd
    from ronde.ray import tune as ronde_tune
    hvd.init()
    hvd.allreduce(torch.ones(2), name="before")
    if config["bad_rank"] is not None:
        if hvd.rank() == config["bad_rank"]:
            raise ValueError("bad rank %s on purpose" % os.environ["RONDE_RANK"])
        hvd.allreduce(torch.ones(2), name="never")  # the other rank waits here until killed
    step = 0
    while True:
        step += 1
        total = hvd.allreduce(torch.tensor([float(step)]), op=hvd.Sum, name="step").item()
        ronde_tune.report({"loss": 1.0 / step, "total": total})


def test_a_failing_rank_fails_its_trial_and_a_stopped_trial_frees_its_ranks(ray_cluster,
                                                                            tmp_path):
    import ray
    from ray import tune
    trainable = DistributedTrainableCreator(failing_or_endless_trial, num_workers=2,
                                            cpus_per_worker=0.5, timeout_s=60)
    started = time.monotonic()
    results = tune.Tuner(
        trainable, param_space={"bad_rank": tune.grid_search([1, None])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="ronde", verbose=0,
                                  stop={"training_iteration": 3})).fit()
    assert time.monotonic() - started < 240  # bounded: neither trial hangs (load is high)
    assert len(results.errors) == 1
    message = str(results.errors[0])
    assert "rank 1 on node" in message and "bad rank 1 on purpose" in message
    stopped = next(r for r in results if r.config["bad_rank"] is None)
    assert stopped.error is None
    frame = stopped.metrics_dataframe
    assert list(frame["training_iteration"]) == [1, 2, 3]
    assert list(frame["total"]) == [2.0, 4.0, 6.0]  # both ranks' step numbers, summed
    # Both trials' ranks are gone (the endless one's were killed when Tune stopped it).
    wait_for_free_cpus(ray, 2)


def test_report_outside_a_trial_and_bad_arguments_are_clear_errors():
    from ronde.ray import tune as ronde_tune
    with pytest.raises(RuntimeError, match="not inside a trial"):
        ronde_tune.report({"loss": 1.0})
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        DistributedTrainableCreator(regression_trial, num_workers=0)
    with pytest.raises(TypeError, match="must be callable"):
        DistributedTrainableCreator("train.py", num_workers=2)
