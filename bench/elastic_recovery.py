#!/usr/bin/env python3
"""How fast an elastic job recovers: ronde's elastic driver beside torchrun, same job, same run.

  1. ronde, 4 workers, no fault: the reference accuracy.
  2. ronde, 4 workers; SIGKILL one after step 16: time from the kill to the first completed
     step of the re-formed world (3 workers); then a fifth host appears in discovery: time
     from writing it to the new worker's first step in the world of 4.
  3. torchrun --nnodes 1:4 --nproc-per-node 4 --rdzv-backend c10d --max-restarts 3, the same job on gloo with a
     checkpoint every 4 steps; SIGKILL one worker after step 16: time from the kill to the
     first completed step after torchrun restarted every worker.

Hosts are loopback addresses (127.0.0.x), so ronde's workers talk TCP as across hosts.
Usage: bench/elastic_recovery.py [--python .venv/bin/python] [--ronde .venv/bin/ronde]
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "elastic"))
import elastic_job  # noqa: E402
from elastic_job import ElasticJob, HostsFile  # noqa: E402

JOB = ["--epochs", "12", "--commit-every", "4", "--step-delay", "0.02"]


def first_after(job, prefix, when, size=None, pid=None):
    times = [t for t, _, f in job.lines(prefix) if t > when and
             (size is None or int(f["size"]) == size) and (pid is None or int(f["pid"]) == pid)]
    return min(times) if times else None


def world(job, size):
    seen = {}
    for _, _, f in job.lines("synced"):
        if int(f["size"]) == size:
            seen[int(f["rank"])] = int(f["pid"])
    return seen


def committed(job, step):
    return any(int(f["step"]) >= step for _, _, f in job.lines("commit"))


def accuracy(job):
    done = [float(f["accuracy"]) for _, _, f in job.lines("done")]
    return done[0] if done else float("nan")


def ronde_fixed(directory):
    hosts = HostsFile(directory, ["127.0.0.%d:1" % i for i in range(1, 5)])
    job = ElasticJob(["-np", "4", "--host-discovery-script", hosts.script], JOB)
    assert job.finish(300) == 0, job.output()
    return accuracy(job)


def ronde_fault(directory):
    hosts = HostsFile(directory, ["127.0.0.%d:1" % i for i in range(1, 5)])
    job = ElasticJob(["-np", "4", "--min-np", "2", "--max-np", "4",
                      "--host-discovery-script", hosts.script], JOB)
    job.wait_for(lambda: len(world(job, 4)) == 4 and committed(job, 16), 300, "step 16")
    killed_at = time.time()
    os.kill(world(job, 4)[2], signal.SIGKILL)
    job.wait_for(lambda: first_after(job, "first step", killed_at, size=3), 120, "3 workers")
    resumed = first_after(job, "first step", killed_at, size=3) - killed_at
    hosts.write(["127.0.0.%d:1" % i for i in range(1, 6)])
    added_at = time.time()
    job.wait_for(lambda: first_after(job, "first step", added_at, size=4), 120, "4 workers")
    joined = first_after(job, "first step", added_at, size=4) - added_at
    assert job.finish(300) == 0, job.output()
    return resumed, joined, accuracy(job)


def torchrun_fault(directory, python):
    checkpoint = os.path.join(directory, "torchrun.pt")
    # c10d rendezvous: with --standalone, torch 2.13's restarted gloo workers failed to connect
    # (connectFullMesh timed out) on every restart here.
    command = [python, "-u", "-m", "torch.distributed.run", "--nnodes", "1:4",
               "--nproc-per-node", "4", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", "127.0.0.1:%d" % (29400 + os.getpid() % 500),
               "--max-restarts", "3",
               os.path.join(HERE, "elastic_torchrun_digits.py"), "--checkpoint", checkpoint] + JOB
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines = []
    killed_at = None
    victim = None
    for line in process.stdout:
        now = time.time()
        lines.append((now, line))
        text = line.split("elastic:", 1)[-1]
        f = elastic_job.fields(text)
        if "synced" in line and f.get("rank") == "2" and victim is None:
            victim = int(f["pid"])
        if killed_at is None and "commit" in line and int(f["step"]) >= 16 and victim:
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
        if killed_at and "first step" in line and now > killed_at:
            resumed = now - killed_at
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            return resumed
    process.wait()
    raise RuntimeError("torchrun ended before resuming:\n" + "".join(l for _, l in lines[-50:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--ronde", default=os.environ.get("RONDE_BIN", "ronde"))
    args = parser.parse_args()
    os.environ["RONDE_BIN"] = args.ronde
    os.environ["RONDE_TEST_PYTHON"] = args.python
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, \
            tempfile.TemporaryDirectory() as d3:
        fixed = ronde_fixed(d1)
        print("ronde, 4 workers, no fault: test accuracy %.4f" % fixed, flush=True)
        resumed, joined, faulted = ronde_fault(d2)
        print("ronde: kill -> first step on 3 workers %.2f s; new host in discovery -> first "
              "step on 4 workers %.2f s; test accuracy %.4f" % (resumed, joined, faulted),
              flush=True)
        restarted = torchrun_fault(d3, args.python)
        print("torchrun --max-restarts: kill -> first step after the restart %.2f s" % restarted,
              flush=True)
        print("ratio torchrun / ronde (resume after a death): %.1fx" % (restarted / resumed))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
