"""ronde.spark.run on a local-cluster: results, a failing rank, too few slots, bad input."""

import os
import sys
import threading
import time

import pytest

import ronde.spark
from pyspark import cloudpickle

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def rank_processes():
    """Rank processes ronde.spark started that are still alive (orphans, after a run)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"ronde.spark import _task" in cmdline:
            found.append(int(pid))
    return found


def wait_no_rank_processes(timeout=30):
    deadline = time.monotonic() + timeout
    while rank_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    return rank_processes()


def allreduce_fn(scale):
    import torch
    import ronde.torch as hvd
    hvd.init()
    value = hvd.allreduce(torch.tensor([float(hvd.rank() + 1) * scale]), op=hvd.Sum)
    print("rank %d says hello" % hvd.rank())
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": value.item(),
            "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
            "env_rank": int(os.environ["HOROVOD_RANK"])}


def test_two_rank_allreduce_returns_results_in_rank_order(spark, capsys):
    results = ronde.spark.run(allreduce_fn, args=(10.0,), num_proc=2, start_timeout=120)
    # 10 * (1 + 2), independent of which task ran where.
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["env_rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 and r["sum"] == 30.0 for r in results)
    # Both executors of local-cluster are on this host: one host, local ranks 0 and 1.
    assert sorted(r["local_rank"] for r in results) == [0, 1]
    assert all(r["local_size"] == 2 for r in results)
    out = capsys.readouterr().out
    assert "[0]<stdout>:rank 0 says hello" in out and "[1]<stdout>:rank 1 says hello" in out
    assert wait_no_rank_processes() == []


def fail_on_rank_one():
    import torch
    import ronde.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("deliberate failure on rank one")
    # Rank 0 waits in a collective rank 1 never joins: the run must not hang on it.
    hvd.allreduce(torch.ones(1), name="never_completed")
    return "rank 0 should not have finished"


def test_a_rank_that_raises_fails_the_run_naming_rank_host_and_traceback(spark):
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        ronde.spark.run(fail_on_rank_one, num_proc=2, start_timeout=120)
    message = str(failure.value)
    assert "rank 1 on host" in message
    assert "ValueError: deliberate failure on rank one" in message
    assert "Traceback" in message and "fail_on_rank_one" in message
    assert time.monotonic() - started < 90
    assert wait_no_rank_processes() == []
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []


def test_more_ranks_than_slots_fails_after_start_timeout(spark):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"of 3 ranks started within start_timeout=3s.*"
                                           r"fewer than 3 free task slots"):
        ronde.spark.run(allreduce_fn, args=(1.0,), num_proc=3, start_timeout=3)
    assert time.monotonic() - started < 60
    deadline = time.monotonic() + 30
    while spark.sparkContext.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []
    assert wait_no_rank_processes() == []
    # The cluster is still usable afterwards.
    assert [r["sum"] for r in ronde.spark.run(allreduce_fn, args=(1.0,), num_proc=2)] == [3.0, 3.0]


def test_an_unpicklable_fn_is_refused_before_any_task_starts(spark):
    lock = threading.Lock()

    def uses_a_lock():
        with lock:
            return 1

    # A job an earlier test cancelled may still be winding down (cancellation is asynchronous).
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tracker.getActiveJobsIds() == [], "an earlier test left a Spark job running"
    with pytest.raises(ValueError, match="must be picklable"):
        ronde.spark.run(uses_a_lock, num_proc=2)
    assert tracker.getActiveJobsIds() == []


def test_bad_num_proc_is_a_clear_error(spark):
    with pytest.raises(ValueError, match="num_proc must be a positive integer"):
        ronde.spark.run(allreduce_fn, args=(1.0,), num_proc=0)


def killed_on_rank_one(target):
    """Rank 1 is killed (its own process, or its executor's JVM) while rank 0 waits in a
    collective that rank 1 never joins."""
    import signal
    import torch
    import ronde.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(1), name="both_here")
    if hvd.rank() == 1:
        pid = os.getpid()
        if target == "executor":
            while pid > 1:  # up the process tree to the executor JVM that started this task
                with open("/proc/%d/stat" % pid) as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"CoarseGrainedExecutorBackend" in f.read():
                        break
        os.kill(pid, signal.SIGKILL)
        time.sleep(60)
    hvd.allreduce(torch.ones(1), name="never_completed")
    return "rank 0 should not have finished"


def wait_for_executors(spark, count=2, timeout=120):
    context = spark.sparkContext
    deadline = time.monotonic() + timeout
    while context._jsc.sc().getExecutorMemoryStatus().size() < count + 1 and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert context._jsc.sc().getExecutorMemoryStatus().size() == count + 1


@pytest.mark.parametrize("target", ["rank", "executor"])
def test_a_killed_rank_or_executor_fails_the_run_naming_rank_one(spark, target):
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        ronde.spark.run(killed_on_rank_one, args=(target,), num_proc=2, start_timeout=120)
    message = str(failure.value)
    print(message)
    assert "rank 1" in message
    assert time.monotonic() - started < 90
    assert wait_no_rank_processes() == []
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 30
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tracker.getActiveJobsIds() == []
    # The cluster is usable afterwards (Spark replaces a lost executor).
    wait_for_executors(spark)
    assert [r["sum"] for r in ronde.spark.run(allreduce_fn, args=(1.0,), num_proc=2)] == [3.0, 3.0]
