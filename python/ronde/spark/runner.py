"""ronde.spark.run: a ronde job on Spark executors, one barrier task per rank.

The driver serves the job's rendezvous store (as `ronde run` does) and watches it: tasks
report there when they start and when a rank fails, so the driver can fail the run at once
with the rank's host and traceback, and can tell "not enough slots" from "slow to start".
"""

import sys
import threading
import time
import uuid

from ronde import _job_env


DEFAULT_START_TIMEOUT = 600.0


def _pickled(fn, args, kwargs):
    from pyspark import cloudpickle
    try:
        return cloudpickle.dumps((fn, tuple(args), dict(kwargs)))
    except Exception as error:  # cloudpickle raises whatever the object's reducer raises
        raise ValueError("ronde.spark.run: fn and its arguments must be picklable "
                         "(cloudpickle), but pickling failed: %s: %s"
                         % (type(error).__name__, error)) from error


def _driver_address(context, nics):
    """The address executors reach the driver at: spark.driver.host, or a named interface."""
    if nics:
        from ronde.spark._nics import address_of_interface
        for name in nics:
            address = address_of_interface(name)
            if address:
                return address
        raise ValueError("ronde.spark.run: none of the interfaces %s has an IPv4 address here"
                         % sorted(nics))
    host = context.getConf().get("spark.driver.host", None) or "127.0.0.1"
    return _job_env.reachable_address(host)


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, env=None, stdout=None,
        stderr=None, verbose=1, nics=None, prefix_output_with_timestamp=False):
    """Runs fn(*args, **kwargs) as a ronde job of num_proc ranks on Spark; returns the results.

    One barrier-mode task per rank, placed by Spark; the ranks on one executor host share its
    memory (shm), the others meet over TCP. Returns the per-rank return values in rank order.
    A rank that raises fails the run with a RuntimeError naming its rank, host and traceback;
    if num_proc tasks have not all started within start_timeout seconds (default 600,
    Horovod's) the run is cancelled with a TimeoutError saying so.
    stdout/stderr (default sys.stdout/sys.stderr) receive each rank's output, prefixed
    "[rank]<stdout>:", after the run; executors' logs get it as it is written.
    """
    from pyspark import SparkContext
    from ronde import _core

    kwargs = kwargs or {}
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("ronde.spark.run: no active SparkContext; create a SparkSession "
                           "first (SparkSession.builder.getOrCreate())")
    if num_proc is None:
        num_proc = context.defaultParallelism
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError("ronde.spark.run: num_proc must be a positive integer, not %r"
                         % (num_proc,))
    if start_timeout is None:
        start_timeout = DEFAULT_START_TIMEOUT
    payload = _pickled(fn, args, kwargs)
    secret = _job_env.make_secret()
    server = _core.TcpStoreServer("0.0.0.0", 0, secret)
    job = {
        "store_address": "%s:%d" % (_driver_address(context, nics), server.port),
        "secret": secret,
        "env": dict(env or {}),
        "timestamps": bool(prefix_output_with_timestamp),
    }
    if nics:
        # The data plane binds where the rendezvous does: the interface the user named.
        job["env"].setdefault("RONDE_INTERFACE", sorted(nics)[0])
    group = "ronde.spark.run-" + uuid.uuid4().hex
    outcome = {}

    def spark_job():
        from ronde.spark import _task
        context.setJobGroup(group, "ronde job of %d ranks" % num_proc, interruptOnCancel=True)
        try:
            rdd = context.parallelize(range(num_proc), num_proc).barrier()
            outcome["results"] = rdd.mapPartitions(lambda _: _task.run_task(job, payload)).collect()
        except BaseException as error:  # noqa: B036 - reported by the calling thread
            outcome["error"] = error

    try:
        store = _core.TcpStore("127.0.0.1", server.port, secret, 30.0)
        if verbose >= 1:
            stderr.write("ronde.spark.run: %d ranks, rendezvous at %s\n"
                         % (num_proc, job["store_address"]))
        thread = threading.Thread(target=spark_job, name="ronde-spark-job", daemon=True)
        started_at = time.monotonic()
        thread.start()
        failure = None
        timed_out = False
        while thread.is_alive():
            thread.join(0.2)
            found = store.try_get("spark/failure")
            if found is not None:
                failure = found.decode("utf-8", "replace")
                break
            started = int(store.add("spark/started", 0))
            if started < num_proc and time.monotonic() - started_at > start_timeout:
                timed_out = True
                break
        if thread.is_alive():
            context.cancelJobGroup(group)
            # A started job ends at once when cancelled. One that never got its slots may
            # still sit in Spark's barrier slot check (spark.scheduler.barrier
            # .maxConcurrentTasksCheck.*), outside any job group: it fails there on its own,
            # and should its tasks start later they find the store closed and fail at once.
            thread.join(5 if timed_out else 30)
        if failure is None:
            found = store.try_get("spark/failure")
            failure = found.decode("utf-8", "replace") if found is not None else None
        if failure is not None:
            raise RuntimeError("ronde.spark.run: " + failure)
        if timed_out:
            started = int(store.add("spark/started", 0))
            raise TimeoutError(
                "ronde.spark.run: only %d of %d ranks started within start_timeout=%gs: the "
                "Spark cluster has fewer than %d free task slots (barrier mode needs all of "
                "them at once); lower num_proc or add executors" %
                (started, num_proc, start_timeout, num_proc))
        if "error" in outcome:
            raise RuntimeError("ronde.spark.run: the Spark job failed: %s" % outcome["error"]) \
                from outcome["error"]
    finally:
        server.close()

    from pyspark import cloudpickle
    ordered = sorted(outcome["results"], key=lambda item: item[0])
    for _, _, lines in ordered:
        for line in lines:
            target = stderr if "]<stderr>:" in line[:40] else stdout
            target.write(line)
    return [cloudpickle.loads(value) for _, value, _ in ordered]
