"""ElasticRayExecutor on a head + 2-node ray.cluster_utils.Cluster: elastic digits training
(hvd.elastic.run, TorchState) that loses a node, goes on alone from its last commit, and
grows back to two workers when a node is added (once losing rank 1, once rank 0); identical
parameters at the end."""

import gzip
import os
import sys
import threading
import time

import pytest

from ronde.ray import ElasticRayExecutor
from ray import cloudpickle

# The workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ray_executor import digits_path  # noqa: E402

COMMIT_EVERY = 10


def elastic_train(path, log_path, finish_path, max_steps):
    """The digits MLP under @hvd.elastic.run; every rank logs its commits and syncs to
    log_path; training ends at the first commit after finish_path appears (or max_steps)."""
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import ronde.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(1234 + int(os.environ["RONDE_ELASTIC_WORKER_ID"][1:]))  # sync fixes it
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    test, train = order[:360], order[360:]
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    def log(event):
        with open(log_path, "a") as f:
            f.write("%s %d %s %d %d %d\n" % (event, os.getpid(),
                                             os.environ["RONDE_ELASTIC_WORKER_ID"], hvd.rank(),
                                             hvd.size(), state.step))

    @hvd.elastic.run
    def loop(state):
        log("synced")
        while state.step < max_steps:
            # The global batch of 64 is the same whatever the size: each rank takes its share.
            start = (state.step * 64) % (len(train) - 64)
            batch = train[start:start + 64][hvd.rank()::hvd.size()]
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
            state.step += 1
            time.sleep(0.02)  # pretend compute, so the test can change the cluster mid-run
            if state.step % COMMIT_EVERY == 0:
                log("commit")
                state.commit()
                done = hvd.allreduce(torch.tensor([float(os.path.exists(finish_path))]),
                                     op=hvd.Max, name="finish")
                if done.item() > 0:
                    break

    loop(state)
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    result = {"rank": hvd.rank(), "size": hvd.size(), "step": state.step, "pid": os.getpid(),
              "worker": os.environ["RONDE_ELASTIC_WORKER_ID"], "accuracy": accuracy,
              "params": [p.detach().clone() for p in model.parameters()]}
    hvd.shutdown()
    return result


def read_log(path):
    """[(event, pid, worker, rank, size, step)] in the order written."""
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 6:
                entries.append((parts[0], int(parts[1]), parts[2], int(parts[3]), int(parts[4]),
                                int(parts[5])))
    return entries


def wait_for(what, condition, failed, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if failed():
            pytest.fail("the run ended while waiting for %s: %r" % (what, failed()))
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail("no %s within %ds" % (what, timeout))


class TrainingRun:
    """executor.run(elastic_train, ...) on a thread of the test, with the log it writes: the
    test changes the cluster while the run goes on and reads what the workers committed."""

    def __init__(self, executor, tmp_path):
        self.log_path, self.finish_path = str(tmp_path / "log"), str(tmp_path / "finish")
        self.outcome = {}
        self.thread = threading.Thread(target=self._drive, args=(executor,), daemon=True)
        self.thread.start()

    def _drive(self, executor):
        try:
            self.outcome["results"] = executor.run(
                elastic_train, args=(digits_path(), self.log_path, self.finish_path, 3000))
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            self.outcome["error"] = error

    def failed(self):
        return self.outcome.get("error") or (not self.thread.is_alive() and "run returned early")

    def commits(self, size, after=0):
        return [e for e in read_log(self.log_path)[after:] if e[0] == "commit" and e[4] == size]

    def finish(self):
        with open(self.finish_path, "w"):
            pass
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the run did not end after the finish flag"


# Rank 0 lost too: the old rank 1 becomes rank 0 and the state comes from it.
@pytest.mark.parametrize("victim_rank", [1, 0])
def test_training_shrinks_when_a_node_goes_and_grows_when_one_comes(ray_cluster, tmp_path,
                                                                   victim_rank):
    import torch
    cluster, _ = ray_cluster
    executor = ElasticRayExecutor(
        ElasticRayExecutor.create_settings(timeout_s=60, elastic_timeout_s=60, reset_grace_s=3),
        min_workers=1, max_workers=2, cpus_per_worker=1)
    executor.start()
    training = TrainingRun(executor, tmp_path)
    log_path, failed, commits = training.log_path, training.failed, training.commits
    thread, outcome = training.thread, training.outcome
    try:
        wait_for("commits of two workers", lambda: len(commits(2)) >= 4, failed)
        # Remove the node of victim_rank; the other worker survives.
        running = {w["rank"]: w for w in executor.workers() if w["state"] == "running"}
        lost, survivor = running[victim_rank], running[1 - victim_rank]
        victim = [n for n in cluster.list_all_nodes() if n.node_id == lost["node_id"]][0]
        cluster.remove_node(victim)
        mark = len(read_log(log_path))
        wait_for("commits of one worker", lambda: len(commits(1, mark)) >= 3, failed)
        # A node comes: a new worker starts there and the world grows to two again.
        cluster.add_node(num_cpus=1)
        mark = len(read_log(log_path))
        wait_for("commits of two workers after the node came",
                 lambda: len({e[2] for e in commits(2, mark)}) == 2 and len(commits(2, mark)) >= 6,
                 failed)
        training.finish()
    finally:
        if thread.is_alive():
            executor.shutdown()
            thread.join(timeout=30)
        executor.shutdown()
    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    log = read_log(log_path)

    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 for r in results)
    for a, b in zip(results[0]["params"], results[1]["params"]):
        assert torch.equal(a, b)
    assert results[0]["step"] == results[1]["step"]
    # The survivor kept its process through both re-formings; the new worker is a third one.
    survivor_pids = {e[1] for e in log if e[2] == survivor["id"]}
    assert results[0]["worker"] == survivor["id"] and survivor_pids == {results[0]["pid"]}
    assert results[1]["worker"] not in (survivor["id"], lost["id"])
    # Alone, the survivor resumed from its last commit of the two-worker world.
    synced_alone = [e for e in log if e[0] == "synced" and e[4] == 1]
    assert synced_alone and synced_alone[0][2] == survivor["id"]
    last_commit = max(e[5] for e in log[:log.index(synced_alone[0])]
                      if e[0] == "commit" and e[2] == survivor["id"] and e[4] == 2)
    assert synced_alone[0][5] == last_commit
    # The new worker started from the survivor's state, not from step 0.
    joined = [e for e in log if e[0] == "synced" and e[2] == results[1]["worker"]][0]
    assert joined[5] > last_commit
    assert [len(ids) for ids in executor.generations()] == [2, 1, 2]
    assert results[0]["accuracy"] > 0.85


def test_a_stopped_worker_is_killed_and_the_others_go_on(ray_cluster, tmp_path):
    """A SIGSTOPped worker: Ray still sees its actor alive; its peer's liveness monitor records
    it silent, and the driver kills it and re-forms without its node (before: every new world
    waited for it)."""
    import signal
    executor = ElasticRayExecutor(
        ElasticRayExecutor.create_settings(timeout_s=60, elastic_timeout_s=60, reset_grace_s=3,
                                           env={"RONDE_LIVENESS_TIMEOUT_SECONDS": "3"},
                                           verbose=0),
        min_workers=1, max_workers=2, cpus_per_worker=1)
    executor.start()
    training = TrainingRun(executor, tmp_path)
    log_path, failed, commits = training.log_path, training.failed, training.commits
    thread, outcome = training.thread, training.outcome
    stopped_pid = None
    try:
        wait_for("commits of two workers", lambda: len(commits(2)) >= 3, failed)
        running = {w["rank"]: w for w in executor.workers() if w["state"] == "running"}
        victim, survivor = running[1], running[0]
        stopped_pid = [e[1] for e in read_log(log_path) if e[2] == victim["id"]][-1]
        mark = len(read_log(log_path))
        os.kill(stopped_pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_for("commits of the survivor alone", lambda: len(commits(1, mark)) >= 2, failed)
        print("stop -> survivor's second commit alone: %.1f s" % (time.monotonic() - stopped_at))
        # The driver killed the stopped process (while the run goes on, not at its end).
        wait_for("the stopped worker's end", lambda: process_ended(stopped_pid), failed,
                 timeout=20)
        training.finish()
    finally:
        if thread.is_alive():
            executor.shutdown()
            thread.join(timeout=30)
        executor.shutdown()
        if stopped_pid is not None and not process_ended(stopped_pid):
            os.kill(stopped_pid, signal.SIGKILL)  # a failed test leaves no stopped process
    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    assert [(r["rank"], r["size"], r["worker"]) for r in results] == [(0, 1, survivor["id"])]
    assert [len(ids) for ids in executor.generations()] == [2, 1]


def process_ended(pid):
    """Whether `pid` is gone or a zombie (killed, not yet reaped by its parent)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_bad_arguments_are_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="min_workers must be a positive integer"):
        ElasticRayExecutor(min_workers=0)
    with pytest.raises(ValueError, match="max_workers must be an integer >= min_workers"):
        ElasticRayExecutor(min_workers=3, max_workers=2)
    with pytest.raises(ValueError, match="gpus_per_worker needs use_gpu"):
        ElasticRayExecutor(gpus_per_worker=1)
    with pytest.raises(RuntimeError, match="call start"):
        ElasticRayExecutor().run(lambda: None)


def test_assignments_are_written_in_the_format_the_workers_parse():
    from ronde import _core
    assert _core.ELASTIC_GENERATION_KEY == "elastic/generation"
    assert _core.elastic_assignment_key(3, "r7") == "elastic/gen/3/assign/r7"
    assert _core.elastic_reset_request_key(3) == "elastic/reset_request/3"
    assert _core.elastic_silent_key(3, 1) == "elastic/gen/3/world/liveness/silent/1"
    assert _core.format_elastic_assignment(1, 2, 0, 1, 1, 2, "10.0.0.2/ray-ab") == \
        "1 2 0 1 1 2 10.0.0.2/ray-ab"
    with pytest.raises(_core.RondeError, match="not an elastic assignment"):
        _core.format_elastic_assignment(2, 2, 0, 1, 0, 1, "host")   # rank >= size


def test_fewer_slots_than_min_workers_end_the_run_after_elastic_timeout(ray_cluster):
    executor = ElasticRayExecutor(
        ElasticRayExecutor.create_settings(elastic_timeout_s=2, verbose=0), min_workers=3)
    executor.start()
    try:
        with pytest.raises(RuntimeError, match="fewer than min_workers=3 slots"):
            executor.run(lambda: None)
    finally:
        executor.shutdown()


def test_a_worker_whose_function_raises_fails_the_run_naming_it(ray_cluster):
    import ray
    from test_ray_executor import wait_for_free_cpus

    def broken():
        raise ValueError("a bug in the training script")

    executor = ElasticRayExecutor(ElasticRayExecutor.create_settings(verbose=0),
                                  min_workers=2, max_workers=2)
    executor.start()
    try:
        with pytest.raises(RuntimeError, match=r"worker r\d \(rank \d\) on node .* failed"
                                               r"(.|\n)*a bug in the training script"):
            executor.run(broken)
    finally:
        executor.shutdown()
    wait_for_free_cpus(ray, 2)  # its actors are gone


def logged_world():
    import ronde.torch as hvd
    from ronde.ray import ray_logger
    hvd.init()
    seen = (hvd.rank(), hvd.size(), os.environ.get("FROM_ENV_VARS"))
    ray_logger.log({"rank": hvd.rank()})
    hvd.shutdown()
    return seen


def test_horovods_form_with_settings_bounds_env_vars_and_callbacks(ray_cluster):
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=2,
                                                  elastic_timeout=60, timeout_s=60, verbose=0)
    assert (settings.min_num_proc, settings.max_num_proc, settings.elastic_timeout_s) == \
        (2, 2, 60.0)
    executor = ElasticRayExecutor(settings, use_gpu=False, cpus_per_slot=1,
                                  env_vars={"FROM_ENV_VARS": "yes"})
    assert (executor.min_workers, executor.max_workers) == (2, 2)
    executor.start()
    messages = []
    try:
        results = executor.run(logged_world, callbacks=[messages.append])
    finally:
        executor.shutdown()
    assert sorted(results) == [(0, 2, "yes"), (1, 2, "yes")]
    assert sorted(m["rank"] for m in messages) == [0, 1]
    with pytest.warns(DeprecationWarning, match="min_num_proc"):
        assert ElasticRayExecutor.create_settings(min_np=3).min_num_proc == 3
    with pytest.raises(NotImplementedError, match="override_discovery"):
        ElasticRayExecutor(settings, override_discovery=False)
