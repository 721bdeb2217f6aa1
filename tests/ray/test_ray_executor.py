"""RayExecutor on a head + 2-node ray.cluster_utils.Cluster: digits training, placement,
too few slots, a node lost mid-run."""

import gzip
import importlib.util
import os
import sys
import threading
import time

import pytest

from ronde.ray import RayExecutor
from ray import cloudpickle

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def digits_path():
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        found = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                             "digits.csv.gz")
        if os.path.exists(found):
            return found
    return "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def train_digits(path, epochs):
    """examples/train_digits.py's recipe; returns accuracy, parameters and the topology."""
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import ronde.torch as hvd

    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different initial weights: broadcast must fix that
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    test, train = order[:360], order[360:]
    mine = train[hvd.rank()::hvd.size()]
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    for _ in range(epochs):
        for start in range(0, len(mine) - 31, 32):
            batch = mine[start:start + 32]
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    result = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
              "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
              "cross_size": hvd.cross_size(), "accuracy": accuracy,
              "params": [p.detach().clone() for p in model.parameters()]}
    hvd.shutdown()
    return result


def test_digits_training_on_two_workers_ends_with_identical_parameters(ray_cluster):
    import torch
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2,
                           cpus_per_worker=1, placement_group_strategy="SPREAD")
    executor.start()
    try:
        results = executor.run(train_digits, args=(digits_path(), 6))
        placements = executor.placements()
    finally:
        executor.shutdown()
    assert [r["rank"] for r in results] == [0, 1]
    for a, b in zip(results[0]["params"], results[1]["params"]):
        assert torch.equal(a, b)
    assert all(r["accuracy"] > 0.9 for r in results)
    # One CPU per node: Ray put the ranks on different nodes, and ronde's topology says so.
    nodes = {p["where"]["node_id"] for p in placements}
    assert len(nodes) == 2
    for r, p in zip(results, placements):
        assert (r["local_rank"], r["local_size"]) == (p["local_rank"], p["local_size"]) == (0, 1)
        assert (r["cross_rank"], r["cross_size"]) == (p["cross_rank"], p["cross_size"])
        assert r["cross_size"] == 2


def test_run_twice_and_execute_on_the_same_actors(ray_cluster):
    executor = RayExecutor(num_workers=2)
    executor.start()
    try:
        def world(executable):
            import ronde.torch as hvd
            assert executable is None  # no executable_cls: Horovod passes None
            hvd.init()
            seen = (hvd.rank(), hvd.size())
            hvd.shutdown()
            return seen
        assert executor.execute(world) == [(0, 2), (1, 2)]
        assert executor.run(lambda a, b=0: a + b, args=[1], kwargs={"b": 2}) == [3, 3]
        assert executor.execute_single(lambda _: os.environ["RONDE_RANK"]) == "0"
    finally:
        executor.shutdown()


class Trainer:
    """An executable_cls: made once per actor by start(), handed to execute()'s function."""

    def __init__(self, base, scale=1):
        self.base = base * scale
        self.calls = 0

    def step(self):
        import torch
        import ronde.torch as hvd
        if not hvd.is_initialized():
            hvd.init()
        self.calls += 1
        total = hvd.allreduce(torch.tensor([float(hvd.rank() + self.base)]), op=hvd.Sum)
        return hvd.rank(), self.calls, total.item()


def test_executable_cls_lives_on_each_actor_across_calls(ray_cluster):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start(executable_cls=Trainer, executable_args=[10], executable_kwargs={"scale": 2})
    try:
        # Each rank adds 20 + its rank: 20 + 21.
        assert executor.execute(lambda t: t.step()) == [(0, 1, 41.0), (1, 1, 41.0)]
        assert executor.execute(lambda t: t.step()) == [(0, 2, 41.0), (1, 2, 41.0)]
        assert executor.execute_single(lambda t: (t.base, t.calls)) == (20, 2)
    finally:
        executor.shutdown()


def report_and_wait_for_the_driver(flag_dir, steps):
    """Logs progress to the driver; after the first message waits (bounded) until the driver's
    callback has answered through a file: it can only if callbacks run while the job runs."""
    from ronde.ray import ray_logger
    rank = int(os.environ["RONDE_RANK"])
    ray_logger.log({"rank": rank, "step": 0})
    answer = os.path.join(flag_dir, "seen.%d" % rank)
    deadline = time.monotonic() + 60
    while not os.path.exists(answer) and time.monotonic() < deadline:
        time.sleep(0.05)
    answered = os.path.exists(answer)
    for step in range(1, steps):
        ray_logger.log({"rank": rank, "step": step})
    return answered


def test_callbacks_receive_every_message_while_the_run_goes_on(ray_cluster, tmp_path):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    received = []

    def answer(message):
        received.append((message["rank"], message["step"]))
        if message["step"] == 0:
            open(os.path.join(str(tmp_path), "seen.%d" % message["rank"]), "w").close()

    try:
        answered = executor.run(report_and_wait_for_the_driver, args=[str(tmp_path), 4],
                                callbacks=[answer, lambda m: None])
        # Without callbacks, log() goes nowhere and the run still works.
        assert executor.run(lambda: 7) == [7, 7]
    finally:
        executor.shutdown()
    assert answered == [True, True]
    for rank in (0, 1):
        assert [s for r, s in received if r == rank] == [0, 1, 2, 3]


def test_a_callback_that_raises_fails_the_run_after_it_ends(ray_cluster):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()

    def send():
        from ronde.ray import ray_logger
        ray_logger.log("hello")
        return "done"

    def broken(message):
        raise KeyError(message)

    try:
        with pytest.raises(RuntimeError, match="callback raised KeyError"):
            executor.run(send, callbacks=[broken])
        assert executor.run(send) == ["done", "done"]  # the executor still works
        with pytest.raises(TypeError, match="callables"):
            executor.run(send, callbacks=["not callable"])
    finally:
        executor.shutdown()


def elastic_world():
    import ronde.torch as hvd
    hvd.init()
    seen = (hvd.rank(), hvd.size())
    hvd.shutdown()
    return seen


def test_min_workers_makes_an_elastic_executor_as_in_horovod(ray_cluster):
    with pytest.raises(ValueError, match="min_workers"):
        RayExecutor(RayExecutor.create_settings(), max_workers=2)
    with pytest.raises(ValueError, match="cannot both"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=1)
    with pytest.raises(NotImplementedError, match="cooldown_range"):
        RayExecutor(RayExecutor.create_settings(), min_workers=1, cooldown_range=[1, 2])
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60, verbose=0), min_workers=2,
                           max_workers=2, elastic_timeout=60)
    executor.start()
    try:
        assert sorted(executor.run(elastic_world)) == [(0, 2), (1, 2)]
    finally:
        executor.shutdown()


def test_create_settings_takes_horovods_ssh_arguments(tmp_path):
    key = str(tmp_path / "key")
    settings = RayExecutor.create_settings(timeout_s=5, ssh_identity_file=key, ssh_str="KEY",
                                           placement_group_timeout_s=7, nics={"lo"})
    assert open(key).read() == "KEY" and (os.stat(key).st_mode & 0o777) == 0o600
    assert (settings.timeout_s, settings.placement_group_timeout_s, settings.nics) == \
        (5.0, 7.0, {"lo"})


def test_more_workers_than_the_cluster_has_fail_with_a_clear_error(ray_cluster):
    import ray
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=10, placement_group_timeout_s=5),
                           num_workers=3)
    with pytest.raises(TimeoutError, match="could not place 3 workers"):
        executor.start()
    wait_for_free_cpus(ray, 2)


def wait_for_free_cpus(ray, count, timeout=30):
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= count


def endless_allreduce():
    import torch
    import ronde.torch as hvd
    hvd.init()
    deadline = time.time() + 120
    while time.time() < deadline:
        hvd.allreduce(torch.ones(4), name="forever")
        time.sleep(0.01)
    return "not killed"


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_lost_worker_node_fails_the_run_naming_the_rank_and_leaves_nothing(ray_cluster):
    import ray
    cluster, nodes = ray_cluster
    executor = RayExecutor(num_workers=2, placement_group_strategy="STRICT_SPREAD")
    executor.start()
    placements = executor.placements()
    victim_ip_id = placements[1]["where"]["node_id"]
    victim = next(n for n in nodes if n.node_id == victim_ip_id)
    pids = [p["where"]["pid"] for p in placements]
    killer = threading.Timer(3.0, lambda: cluster.remove_node(victim))
    killer.start()
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"rank 1 on node .* died"):
            executor.run(endless_allreduce)
    finally:
        killer.join()
        executor.shutdown()
    assert time.monotonic() - started < 60
    deadline = time.monotonic() + 30
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(pid) for pid in pids)
    # Its placement group is gone: the surviving node's CPU is free again.
    wait_for_free_cpus(ray, 1)
