#!/usr/bin/env python3
"""ronde.torch against Horovod 0.28.1 (horovod.torch over MPI), the same script with the
import swapped, 2 ranks on this host, rounds interleaved:

  - allreduce_ of one float32 tensor, 4 KiB to 64 MiB: time per call;
  - a step of 200 x 16 KiB allreduce_async_ then synchronize (many small gradients): time
    per step, and the time one allreduce_async_ call takes inside it (submission cost);
  - 200 x 16 KiB reduce-scattered (a sharded optimizer's step): one grouped_reducescatter,
    and 200 reducescatter_async then synchronize.

`--modes ronde,ronde_unfused,horovod` adds ronde with Tensor Fusion off
(HOROVOD_FUSION_THRESHOLD=0), which shows what fusion gives; `ronde_before` runs ronde from
another environment (`--before-python`, e.g. a venv with an earlier commit's wheel), which
shows what a change gives, in the same interleaved rounds. `--tcp` moves both onto TCP on
loopback (ronde: RONDE_TRANSPORT=tcp; OpenMPI under Horovod: btl self,tcp on lo).

    .venv-horovod/bin/python bench/horovod_peer_bench.py [--rounds 5]

The python must import both ronde.torch and horovod.torch (bench/setup_horovod.sh makes
.venv-horovod and scripts/setup_python.sh's wheel can be installed into it). ronde runs under
`ronde run`, Horovod under `mpirun`; both bind one core per rank. Reports medians over rounds
and the ratio Horovod time / ronde time (above 1: ronde is faster).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def timed(fn, calls, warmup=3):
    """Median of three trials of `calls` calls. The count is fixed, never calibrated per rank:
    ranks that ran different numbers of collectives would wait for each other forever."""
    for _ in range(warmup):
        fn()
    trials = []
    for _ in range(3):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        trials.append((time.perf_counter() - began) / calls)
    return statistics.median(trials)


def calls_for(size):
    return max(5, min(300, (32 << 20) // size))


def worker(args):
    import torch
    torch.set_num_threads(1)
    if args.mode == "ronde":
        import ronde.torch as hvd
    else:
        import horovod.torch as hvd
    hvd.init()
    results = {}
    for size in (SIZES if args.sweep else []):
        tensor = torch.ones(size // 4)

        def one():
            hvd.allreduce_(tensor, name="sweep.%d" % size, op=hvd.Sum)
        seconds = max(hvd.allgather_object(timed(one, calls_for(size))))
        results["allreduce_%d" % size] = seconds
    grads = [torch.ones(4096) for _ in range(200)]  # 16 KiB each

    names = ["grad.%d" % i for i in range(len(grads))]
    submit_seconds = []

    def step():
        began = time.perf_counter()
        handles = [hvd.allreduce_async_(g, name=n) for g, n in zip(grads, names)]
        submit_seconds.append((time.perf_counter() - began) / len(grads))
        for h in handles:
            hvd.synchronize(h)
    results["step_200x16KiB"] = max(hvd.allgather_object(timed(step, 50)))
    results["submit_per_call"] = max(hvd.allgather_object(statistics.median(submit_seconds)))

    shards = [torch.ones(4096) for _ in range(200)]  # 16 KiB each, 8 KiB kept per rank

    def grouped_scatter():
        hvd.grouped_reducescatter(shards, name="shards", op=hvd.Sum)

    def scatter_each():
        handles = [hvd.reducescatter_async(t, name=n, op=hvd.Sum) for t, n in zip(shards, names)]
        for h in handles:
            hvd.synchronize(h)
    results["grouped_reducescatter_200x16KiB"] = max(
        hvd.allgather_object(timed(grouped_scatter, 50)))
    results["reducescatter_async_200x16KiB"] = max(hvd.allgather_object(timed(scatter_each, 50)))
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)
    sys.stdout.flush()
    os._exit(0)


def run_one(args, mode):
    python = args.python
    if mode == "ronde_before":
        if not args.before_python:
            raise SystemExit("ronde_before needs --before-python")
        python = args.before_python
    me = [python, os.path.abspath(__file__), "--worker", "--mode", mode]
    if not args.sweep:
        me.append("--no-sweep")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if mode == "horovod":
        transport = (["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
                     if args.tcp else [])
        command = (["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "core",
                    "-x", "OPENBLAS_NUM_THREADS", "-x", "OMP_NUM_THREADS"] + transport + me)
    else:
        if args.tcp:
            env["RONDE_TRANSPORT"] = "tcp"
        me[me.index(mode)] = "ronde"
        launcher = args.ronde
        if mode == "ronde_before":
            launcher = os.path.join(os.path.dirname(python), "ronde")
        command = [launcher, "run", "-np", "2", "--bind-to", "core"] + me
        if mode == "ronde_unfused":
            env["HOROVOD_FUSION_THRESHOLD"] = "0"
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError("%s failed:\n%s\n%s" % (mode, out.stdout, out.stderr))


def label(key):
    if key.startswith("allreduce_"):
        size = int(key.split("_")[1])
        return "allreduce %s" % ("%d KiB" % (size >> 10) if size < (1 << 20)
                                 else "%d MiB" % (size >> 20))
    if key == "submit_per_call":
        return "allreduce_async_ call"
    if key.startswith("grouped_reducescatter"):
        return "grouped_reducescatter 200 x 16 KiB"
    if key.startswith("reducescatter_async"):
        return "reducescatter_async 200 x 16 KiB"
    return "step 200 x 16 KiB"


def drive(args):
    modes = args.modes.split(",")
    rounds = {mode: [] for mode in modes}
    for index in range(args.rounds):
        for mode in modes:
            rounds[mode].append(run_one(args, mode))
        print("round %d/%d done" % (index + 1, args.rounds), file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print("2 ranks, %s, %d rounds (medians); load average at end: %s" % (
        "TCP on loopback" if args.tcp else "shared memory", args.rounds, load))
    peers = [m for m in modes if m != "ronde"]
    print("%-36s %12s" % ("", "ronde") +
          "".join(" %14s %10s" % (m, m[:6] + "/ronde") for m in peers))
    for key in rounds["ronde"][0]:
        ours = statistics.median(r[key] for r in rounds["ronde"])
        unit, scale = ("us", 1e6) if key == "submit_per_call" else ("ms", 1e3)
        line = "%-36s %9.3f %s" % (label(key), scale * ours, unit)
        for mode in peers:
            theirs = statistics.median(r[key] for r in rounds[mode])
            ratio = statistics.median(h[key] / r[key]
                                      for r, h in zip(rounds["ronde"], rounds[mode]))
            line += " %11.3f %s %9.2fx" % (scale * theirs, unit, ratio)
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["ronde", "horovod"], default="ronde")
    parser.add_argument("--tcp", action="store_true",
                        help="TCP on loopback instead of shared memory, for both")
    parser.add_argument("--modes", default="ronde,horovod",
                        help="what to run, round by round: ronde, ronde_unfused, ronde_before, horovod")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-sweep", dest="sweep", action="store_false",
                        help="only the 200-tensor step and the submission cost")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--before-python",
                        help="the python of ronde_before: an environment with another ronde")
    parser.add_argument("--ronde", default=shutil.which("ronde", path=os.path.dirname(
        sys.executable)) or "ronde")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
