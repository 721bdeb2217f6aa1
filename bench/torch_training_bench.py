#!/usr/bin/env python3
"""Training throughput (samples/s) on synthetic data, 2 ranks on one host:
ronde's DistributedOptimizer vs torch DistributedDataParallel (gloo) vs one process using
every core.

    /usr/bin/python3 bench/torch_training_bench.py [--ronde build/src/launcher/ronde]

Models: an MLP 784-512-512-10 and a small CNN (2 conv + 2 fc on 1x28x28), batch 64 per rank.
Each configuration runs in fresh processes; the driver prints one table (and --json lines).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build_model(kind):
    import torch.nn as nn
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def timed_steps(model, optimizer, batch, steps, warmup):
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    for i in range(warmup + steps):
        if i == warmup:
            began = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return time.perf_counter() - began


def worker(args):
    """One rank (or the single process): runs the steps, prints a JSON line on rank 0."""
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ranks, rank = 1, 0
    if args.mode == "ronde":
        import ronde.torch as hvd
        hvd.init()
        ranks, rank = hvd.size(), hvd.rank()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    elif args.mode == "ddp":
        import torch.distributed as dist
        # `ronde run` only starts the processes here; gloo does the communication.
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                                rank=int(os.environ["RONDE_RANK"]),
                                world_size=int(os.environ["RONDE_SIZE"]))
        ranks, rank = dist.get_world_size(), dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    seconds = timed_steps(model, optimizer, args.batch, args.steps, args.warmup)
    if args.mode == "ronde":
        seconds = max(hvd.allgather_object(seconds))
        hvd.shutdown()
    elif args.mode == "ddp":
        times = [None] * ranks
        dist.all_gather_object(times, seconds)
        seconds = max(times)
    if rank == 0:
        print("RESULT " + json.dumps({
            "mode": args.mode, "model": args.model, "ranks": ranks, "batch_per_rank": args.batch,
            "steps": args.steps, "seconds": seconds,
            "samples_per_s": ranks * args.batch * args.steps / seconds,
            "ms_per_step": 1000 * seconds / args.steps}), flush=True)
    if args.mode == "ddp":
        # gloo's teardown can leave a rank waiting for a peer that already left.
        sys.stdout.flush()
        os._exit(0)


def run(command, env_extra):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=env_extra.pop("OPENBLAS_NUM_THREADS", "1"))
    env.update(env_extra)
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if "RESULT " in line:  # `ronde run` prefixes each line with the rank
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError("%s failed:\n%s\n%s" % (" ".join(command), out.stdout, out.stderr))


def drive(args):
    me = [sys.executable, os.path.abspath(__file__), "--worker"]
    cores = os.cpu_count() or 2
    results = []
    for model in args.models:
        common = ["--model", model, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        results.append(run(me + common + ["--mode", "single", "--batch", str(64 * 2),
                                          "--threads", str(cores)],
                           {"OPENBLAS_NUM_THREADS": str(cores)}))
        results.append(run([args.ronde, "run", "-np", "2"] + me + common +
                           ["--mode", "ronde", "--batch", "64", "--threads", "1"], {}))
        results.append(run([args.ronde, "run", "-np", "2"] + me + common +
                           ["--mode", "ddp", "--batch", "64", "--threads", "1"],
                           {"OMP_NUM_THREADS": "1"}))
    print("%-6s %-7s %5s %12s %10s" % ("model", "mode", "ranks", "samples/s", "ms/step"))
    for r in results:
        print("%-6s %-7s %5d %12.0f %10.2f" % (r["model"], r["mode"], r["ranks"],
                                               r["samples_per_s"], r["ms_per_step"]))
        if args.json:
            print(json.dumps(r))
    for model in args.models:
        by_mode = {r["mode"]: r["samples_per_s"] for r in results if r["model"] == model}
        print("%s: ronde/DDP %.2fx, ronde/one-process %.2fx" % (
            model, by_mode["ronde"] / by_mode["ddp"], by_mode["ronde"] / by_mode["single"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["single", "ronde", "ddp"], default="single")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--ronde", default=os.path.join(HERE, "..", "build", "src", "launcher",
                                                        "ronde"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--port", type=int, default=29533, help="gloo rendezvous (DDP)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
