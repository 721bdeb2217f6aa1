#!/usr/bin/env python3
"""Training throughput (samples/s) on synthetic data, 2 ranks on one host, side by side:
ronde's DistributedOptimizer, torch DistributedDataParallel (gloo, same torch), Horovod
0.28.1 (MPI, when --horovod is given), one rank without any communication, and two ranks
side by side without any communication ("pair": the machine's own ceiling for 2 ranks).

    .venv/bin/python bench/torch_training_bench.py                     # torch 2.13: ronde, DDP
    .venv-horovod/bin/python bench/torch_training_bench.py --horovod   # torch 1.13: + Horovod

Scaling efficiency = 2-rank throughput / (2 x one rank with no communication, one thread,
the same batch per rank), both measured in the same run. "of pair" = 2-rank throughput /
the pair's: what communication costs, apart from what two busy cores cost each other (shared
memory bandwidth and caches, clock) that no library can remove. Every configuration runs in fresh
processes, bound one core per rank (ronde run's and mpirun's default when ranks fit); rounds
interleave the configurations and the table shows medians over rounds, ratios as the median
of per-round ratios. Models: an MLP 784-512-512-10 and a small CNN, batch 64 per rank.

Memory: each rank's resident set (VmRSS, shared memory it touched included) is read once the
model and optimizer exist but before any communication library starts, and again after the
timed steps. "beyond" is how much more a configuration grew than one rank without
communication did in the same round (median): what the communication library itself holds
(runtime, buffers, shared memory), not what torch's own training allocates. The largest rank's
figure is reported; "gradients" is the model's gradient bytes, the most a fusion buffer needs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


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


def resident_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def worker(args):
    """One rank: runs the steps, prints a JSON line on rank 0 (the slowest rank's time)."""
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    started_mib = resident_mib()  # before any communication library starts
    ranks, rank, gather = 1, 0, lambda value: [value]
    if args.mode == "pair":  # each rank trains alone; the driver merges their lines
        ranks, rank = int(os.environ["RONDE_SIZE"]), 0
    if args.mode in ("ronde", "horovod"):
        # The same script for both: only the import differs, as for a user switching.
        if args.mode == "ronde":
            import ronde.torch as hvd
        else:
            import horovod.torch as hvd
        hvd.init()
        ranks, rank, gather = hvd.size(), hvd.rank(), hvd.allgather_object
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

        def gather(value):
            values = [None] * ranks
            dist.all_gather_object(values, value)
            return values
    seconds = timed_steps(model, optimizer, args.batch, args.steps, args.warmup)
    seconds = max(gather(seconds))
    ended_mib = resident_mib()
    memory = max(gather(ended_mib))
    grown = max(gather(ended_mib - started_mib))
    if rank == 0:  # and every rank of a pair, whose rank is 0 here
        gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print("RESULT " + json.dumps({
            "mode": args.mode, "model": args.model, "ranks": ranks, "seconds": seconds,
            "samples_per_s": ranks * args.batch * args.steps / seconds,
            "rss_mib": memory, "grown_mib": grown, "gradient_mib": gradient_bytes / 2.0**20,
            "torch": torch.__version__}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # gloo's and MPI's teardown are not what is measured


def variants(args):
    """--variant LABEL:KEY=VALUE,...: ronde again under extra settings, e.g.
    direct:RONDE_SHM_ALLREDUCE=direct, as a mode "ronde-LABEL" of its own."""
    out = {}
    for spec in args.variant:
        label, _, settings = spec.partition(":")
        env = dict(item.split("=", 1) for item in settings.split(",") if item)
        out["ronde-" + label] = env
    return out


def launch_command(args, mode, model):
    if mode in variants(args):
        mode = "ronde"
    me = [args.python, os.path.abspath(__file__), "--worker", "--mode", mode, "--model", model,
          "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch)]
    if mode == "horovod":
        return ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "core",
                "-x", "OPENBLAS_NUM_THREADS", "-x", "OMP_NUM_THREADS"] + me
    ranks = "1" if mode == "local" else "2"  # a pair is two independent ranks
    return [args.ronde, "run", "-np", ranks, "--bind-to", "core"] + me


def run_one(args, mode, model):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.update(variants(args).get(mode, {}))
    out = subprocess.run(launch_command(args, mode, model), env=env, capture_output=True,
                         text=True, timeout=900)
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in out.stdout.splitlines()
               if "RESULT " in line]  # `ronde run` prefixes each line with the rank
    if mode == "pair" and len(results) == 2:  # as the others report: the slowest rank
        seconds = max(r["seconds"] for r in results)
        return dict(results[0], seconds=seconds,
                    samples_per_s=results[0]["ranks"] * args.batch * args.steps / seconds,
                    rss_mib=max(r["rss_mib"] for r in results),
                    grown_mib=max(r["grown_mib"] for r in results))
    if mode != "pair" and results:
        return results[0]
    raise RuntimeError("%s %s failed:\n%s\n%s" % (mode, model, out.stdout, out.stderr))


def drive(args):
    modes = (["local", "pair", "ronde"] + list(variants(args)) + ["ddp"] +
             (["horovod"] if args.horovod else []))
    if args.without_ddp:  # for longer runs of the bound alone: one rank, the pair, ronde
        modes.remove("ddp")
    samples = {}  # (model, mode) -> [result per round]
    for round_index in range(args.rounds):
        for model in args.models:
            for mode in modes:
                samples.setdefault((model, mode), []).append(run_one(args, mode, model))
        print("round %d/%d done" % (round_index + 1, args.rounds), file=sys.stderr, flush=True)

    torch_version = samples[(args.models[0], "local")][0]["torch"]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print("torch %s, %d rounds (medians), batch %d per rank, %d steps; load average at end: %s"
          % (torch_version, args.rounds, args.batch, args.steps, load))
    print("%-5s %-8s %12s %9s %11s %11s %8s" % ("model", "mode", "samples/s", "RSS MiB",
                                                 "beyond MiB", "efficiency", "of pair"))
    summary = {}
    for model in args.models:
        local = [r["samples_per_s"] for r in samples[(model, "local")]]
        local_grown = [r["grown_mib"] for r in samples[(model, "local")]]
        pair = [r["samples_per_s"] for r in samples[(model, "pair")]]
        for mode in modes:
            rounds = samples[(model, mode)]
            rate = statistics.median(r["samples_per_s"] for r in rounds)
            rss = statistics.median(r["rss_mib"] for r in rounds)
            beyond = statistics.median(r["grown_mib"] - base
                                       for r, base in zip(rounds, local_grown))
            efficiency = ("%10.1f%%" % (100 * statistics.median(
                r["samples_per_s"] / (2 * base) for r, base in zip(rounds, local)))
                if mode != "local" else "%11s" % "-")
            of_pair = ("%7.1f%%" % (100 * statistics.median(
                r["samples_per_s"] / base for r, base in zip(rounds, pair)))
                if mode not in ("local", "pair") else "%8s" % "-")
            print("%-5s %-8s %12.0f %9.0f %11.1f %s %s" % (model, mode, rate, rss, beyond,
                                                           efficiency, of_pair))
            summary[(model, mode)] = rate
        print("%s: gradients %.1f MiB (the most a fusion buffer needs)"
              % (model, samples[(model, "local")][0]["gradient_mib"]))
        for peer in modes[3:]:  # the variants, DDP, Horovod
            ratio = statistics.median(a["samples_per_s"] / b["samples_per_s"] for a, b in
                                      zip(samples[(model, "ronde")], samples[(model, peer)]))
            print("%s: ronde / %s = %.2fx" % (model, peer, ratio))
    if args.json:
        print(json.dumps({"%s/%s" % k: v for k, v in summary.items()}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["local", "pair", "ronde", "ddp", "horovod"],
                        default="local")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--horovod", action="store_true",
                        help="also Horovod (this python must have horovod.torch and mpirun)")
    parser.add_argument("--python", default=sys.executable, help="the workers' interpreter")
    parser.add_argument("--ronde", default=shutil.which("ronde", path=os.path.dirname(
        sys.executable)) or "ronde", help="the ronde command (default: beside this python)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--without-ddp", action="store_true",
                        help="leave DDP out (more rounds of the rest in the same time)")
    parser.add_argument("--variant", action="append", default=[],
                        help="LABEL:KEY=VALUE,...: also ronde under these settings, as mode "
                             "ronde-LABEL (repeatable)")
    parser.add_argument("--port", type=int, default=29533, help="gloo rendezvous (DDP)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
