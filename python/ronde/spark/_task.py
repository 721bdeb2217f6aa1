"""The Spark side of ronde.spark.run: what each barrier task does, and the rank's own process.

A task does not run `fn` in Spark's Python worker: that worker is reused across tasks and
jobs, and a rank's runtime (threads, shared memory, sockets) must start and end with the
rank. The task starts a child interpreter instead, tied to the worker by PR_SET_PDEATHSIG so
that a task Spark kills leaves no rank behind, and reports through the job's store.
"""

import ctypes
import datetime
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

from ronde import _job_env

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec: the child gets SIGKILL when the Spark Python
    # worker that started it exits, however it exits.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _store(job):
    from ronde import _core
    host, port = job["store_address"].rsplit(":", 1)
    return _core.TcpStore(host, int(port), job["secret"], 30.0)


def _prefixed(rank, stream_name, line, with_timestamp):
    prefix = "[%d]<%s>:" % (rank, stream_name)
    if with_timestamp:
        prefix = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + prefix
    return prefix + line


def _pump(pipe, rank, stream_name, with_timestamp, collected, echo):
    """Copies the child's lines into `collected` (sent back to the driver) and `echo`."""
    for raw in iter(pipe.readline, b""):
        line = _prefixed(rank, stream_name, raw.decode("utf-8", "replace"), with_timestamp)
        collected.append(line)
        echo.write(line)
        echo.flush()
    pipe.close()


def run_task(job, payload):
    """Body of one barrier task: returns [(rank, result bytes, output lines)]."""
    from pyspark import BarrierTaskContext
    context = BarrierTaskContext.get()
    rank = context.partitionId()
    # Each task's executor address "host:port": its host is the rank's host.
    hosts = [info.address.rsplit(":", 1)[0] for info in context.getTaskInfos()]
    placement = _job_env.placements(hosts)[rank]
    store = _store(job)
    attempts = store.add("spark/attempts/%d" % rank, 1)
    if attempts > 1:
        # Spark retries a failed barrier stage; the driver is already failing the run (it
        # watches the store), so a second attempt must not start a half-met job.
        raise RuntimeError("ronde.spark.run: rank %d not retried (attempt %d); see the first "
                           "failure" % (rank, attempts))
    store.set("spark/host/%d" % rank, socket.gethostname().encode())
    store.add("spark/started", 1)

    env = dict(os.environ)
    env.update(_job_env.worker_env(placement, job["store_address"], job["secret"], job["env"]))
    workdir = tempfile.mkdtemp(prefix="ronde-spark-rank%d-" % rank)
    payload_path = os.path.join(workdir, "payload")
    result_path = os.path.join(workdir, "result")
    with open(payload_path, "wb") as f:
        f.write(payload)
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from ronde.spark import _task; _task.child_main(sys.argv[1], sys.argv[2])",
         payload_path, result_path],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    output = []
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, rank, "stdout",
                                             job["timestamps"], output, sys.stdout)),
        threading.Thread(target=_pump, args=(child.stderr, rank, "stderr",
                                             job["timestamps"], output, sys.stderr)),
    ]
    for pump in pumps:
        pump.start()
    try:
        code = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    for pump in pumps:
        pump.join(timeout=10)
    reported = False
    try:
        with open(result_path, "rb") as f:
            ok, value, reported = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        ok, value = False, "the rank's process exited with status %d before returning" % code
    finally:
        for path in (payload_path, result_path):
            if os.path.exists(path):
                os.remove(path)
        os.rmdir(workdir)
    if not ok:
        message = failure_message(rank, value)
        if not reported:  # the child could not report (it crashed or was killed)
            report_failure(store, message)
        raise RuntimeError("ronde.spark.run: " + message)
    return [(rank, value, output)]


def failure_message(rank, details):
    return "rank %d on host %s failed:\n%s" % (rank, socket.gethostname(), details)


def report_failure(store, message):
    # First failure wins: the driver reports it and cancels the other tasks.
    if store.add("spark/failures", 1) == 1:
        store.set("spark/failure", message.encode())


def child_main(payload_path, result_path):
    """The rank's process: runs fn and leaves (ok, result or traceback, reported) in
    result_path. A failure is reported to the store from here, before this rank leaves its
    runtime: the other ranks fail only after that ("shut down by rank N"), so the root
    cause, not a consequence, is what the driver reports."""
    from pyspark import cloudpickle
    try:
        with open(payload_path, "rb") as f:
            fn, args, kwargs = cloudpickle.loads(f.read())
        outcome = (True, cloudpickle.dumps(fn(*args, **kwargs)), False)
    except BaseException:  # noqa: B036 - any failure, SystemExit included, is the rank's
        details = traceback.format_exc()
        reported = False
        try:
            job = {"store_address": os.environ["RONDE_STORE_ADDRESS"],
                   "secret": os.environ["RONDE_SECRET"]}
            report_failure(_store(job), failure_message(int(os.environ["RONDE_RANK"]), details))
            reported = True
        except Exception:  # noqa: BLE001 - the task reports it instead
            pass
        outcome = (False, details, reported)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(outcome, f)
    os.rename(result_path + ".tmp", result_path)
    # Leave the runtime before the interpreter tears down (hvd's atexit does it too).
    try:
        from ronde import _core
        _core.shutdown()
    except Exception:  # noqa: BLE001 - a failed shutdown changes nothing about the result
        pass
