#!/usr/bin/env python3
"""How fast an elastic job recovers: ronde's elastic driver beside torchrun, same job, same run.

  1. ronde, 4 workers, no fault: the reference accuracy.
  2. ronde, 4 workers; SIGKILL one after step 16: time from the kill to the first completed
     step of the re-formed world (3 workers); then a fifth host appears in discovery: time
     from writing it to the new worker's first step in the world of 4.
  3. torchrun --nnodes 1 --nproc-per-node 4 --rdzv-backend c10d --max-restarts 3, the same job
     on gloo with a checkpoint every 4 steps; SIGKILL one worker after step 16: time from the
     kill to the first completed step after torchrun restarted every worker.
Steps 2 and 3 alternate for --rounds rounds (which goes first alternates too); the medians
and the load average are printed at the end.

torchrun's restart needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (set here): by default since
torch 2.5 the c10d rendezvous shares its TCPStore with the workers across restarts, and the
restarted gloo workers read the previous attempt's addresses from it and fail in
connectFullMesh ("Connection refused"; pytorch/pytorch#135712, #167288).

Hosts are loopback addresses (127.0.0.x), so ronde's workers talk TCP as across hosts.
Usage: bench/elastic_recovery.py [--python .venv/bin/python] [--ronde .venv/bin/ronde]
"""

import argparse
import os
import signal
import socket
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


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun_fault(directory, python, nnodes="1"):
    checkpoint = os.path.join(directory, "torchrun.pt")
    command = [python, "-u", "-m", "torch.distributed.run", "--nnodes", nnodes,
               "--nproc-per-node", "4", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", "127.0.0.1:%d" % free_port(),
               "--max-restarts", "3",
               os.path.join(HERE, "elastic_torchrun_digits.py"), "--checkpoint", checkpoint] + JOB
    env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
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


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--ronde", default=os.environ.get("RONDE_BIN", "ronde"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torchrun-nnodes", default="1",
                        help="torchrun's --nnodes: 1, or a range such as 1:4 (whose rendezvous "
                             "waits its last-call timeout for more nodes at every restart)")
    parser.add_argument("--skip-fixed", action="store_true",
                        help="skip the fault-free reference run")
    args = parser.parse_args()
    os.environ["RONDE_BIN"] = args.ronde
    os.environ["RONDE_TEST_PYTHON"] = args.python
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    if not args.skip_fixed:
        with tempfile.TemporaryDirectory() as d:
            print("ronde, 4 workers, no fault: test accuracy %.4f" % ronde_fixed(d), flush=True)
    ronde_resume, ronde_join, torchrun_resume, loads = [], [], [], []
    for round_ in range(args.rounds):
        order = ["ronde", "torchrun"] if round_ % 2 == 0 else ["torchrun", "ronde"]
        for which in order:
            loads.append(os.getloadavg()[0])
            with tempfile.TemporaryDirectory() as d:
                if which == "ronde":
                    resumed, joined, faulted = ronde_fault(d)
                    ronde_resume.append(resumed)
                    ronde_join.append(joined)
                    print("round %d ronde: kill -> first step on 3 workers %.2f s; new host in "
                          "discovery -> first step on 4 workers %.2f s; test accuracy %.4f "
                          "(load %.1f)" % (round_, resumed, joined, faulted, loads[-1]),
                          flush=True)
                else:
                    restarted = torchrun_fault(d, args.python, args.torchrun_nnodes)
                    torchrun_resume.append(restarted)
                    print("round %d torchrun --nnodes %s --max-restarts 3: kill -> first step "
                          "after the restart %.2f s (load %.1f)"
                          % (round_, args.torchrun_nnodes, restarted, loads[-1]), flush=True)
    print("medians over %d rounds: ronde resume %.2f s, ronde join %.2f s, torchrun resume "
          "%.2f s; torchrun / ronde %.0fx" % (args.rounds, median(ronde_resume),
                                              median(ronde_join), median(torchrun_resume),
                                              median(torchrun_resume) / median(ronde_resume)))
    print("load average during the rounds: %.1f-%.1f; after: %.2f %.2f %.2f"
          % ((min(loads), max(loads)) + os.getloadavg()))


if __name__ == "__main__":
    main()
