#!/usr/bin/env python3
"""Training throughput of one 2-rank job through each engine: the digits MLP of
examples/train_digits.py (64-128-64-10, batch 32 per rank, SGD) under `ronde run -np 2`,
RayExecutor (2 actors on a head + 2-node ray.cluster_utils.Cluster), ronde.spark.run
(local-cluster[2,1,1024]) and Ray Train's TorchTrainer (torch DDP over gloo, 2 workers on the
same Ray cluster). Only the training loop is timed (after warm-up steps; start-up is
bench/engines_startup.py's job); a job's rate is its slowest rank's. The engines run in
interleaved rounds, so a change in the machine's load hits all of them alike.

    .venv-engines/bin/python bench/engines_throughput.py [--rounds 5] [--steps 1000]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def digits_steps_per_s(steps, warmup, backend):
    """Trains `warmup` then `steps` steps on this rank's shard; returns steps/s of the timed
    part (for DDP the slowest rank's, agreed by an allreduce). backend: 'ronde' or 'ddp'."""
    import gzip
    import time as clock
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(1)
    if backend == "ronde":
        import ronde.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist
        rank, size = dist.get_rank(), dist.get_world_size()
    path = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    mine = torch.arange(rank, len(y), size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    if backend == "ronde":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters())
    else:
        model = nn.parallel.DistributedDataParallel(model)
    batches = [mine[i:i + 32] for i in range(0, len(mine) - 31, 32)]

    def step(i):
        batch = batches[i % len(batches)]
        optimizer.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        optimizer.step()

    for i in range(warmup):
        step(i)
    started = clock.perf_counter()
    for i in range(steps):
        step(i)
    rate = steps / (clock.perf_counter() - started)
    if backend == "ronde":
        rate = hvd.allreduce(torch.tensor([rate]), op=hvd.Min, name="rate").item()
        hvd.shutdown()
    else:
        agreed = torch.tensor([rate])
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        rate = agreed.item()
    return rate


def ronde_run_rate(steps, warmup, bind_to=None):
    """bind_to None: the launcher's default (a core per rank when the ranks fit the cores);
    the engines bind nothing, so 'none' compares like with like on a busy machine."""
    ronde = os.path.join(os.path.dirname(sys.executable), "ronde")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    binding = ["--bind-to", bind_to] if bind_to else []
    out = subprocess.run([ronde, "run", "-np", "2", *binding, sys.executable, HERE, "--worker",
                          "--steps", str(steps), "--warmup", str(warmup)],
                         check=True, capture_output=True, text=True, timeout=600, env=env).stdout
    rates = [float(line.split()[-1]) for line in out.splitlines() if "RATE " in line]
    return min(rates)


class SparkEngine:
    def __init__(self):
        from pyspark.sql import SparkSession
        os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python is the driver's
        self.session = (SparkSession.builder.master("local-cluster[2,1,1024]")
                        .config("spark.driver.host", "127.0.0.1")
                        .config("spark.driver.bindAddress", "127.0.0.1")
                        .config("spark.ui.enabled", "false")
                        .config("spark.executorEnv.OMP_NUM_THREADS", "1")
                        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
                        .getOrCreate())
        context = self.session.sparkContext
        while context._jsc.sc().getExecutorMemoryStatus().size() < 3:
            time.sleep(0.2)

    def rate(self, steps, warmup):
        import ronde.spark
        return min(ronde.spark.run(digits_steps_per_s, args=(steps, warmup, "ronde"),
                                   num_proc=2, verbose=0))

    def close(self):
        self.session.stop()


def _ddp_loop(config):
    import tempfile
    import ray.train
    rate = digits_steps_per_s(config["steps"], config["warmup"], "ddp")
    # Ray Train keeps the metrics of reports that carry a checkpoint (Result.metrics is the
    # latest checkpoint's): every rank reports, rank 0 with a token checkpoint.
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = None
        if ray.train.get_context().get_world_rank() == 0:
            with open(os.path.join(directory, "rate"), "w") as f:
                f.write(repr(rate))
            checkpoint = ray.train.Checkpoint.from_directory(directory)
        ray.train.report({"rate": rate}, checkpoint=checkpoint)


class RayEngine:
    def __init__(self):
        import ray
        from ray.cluster_utils import Cluster
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        for _ in range(2):
            self.cluster.add_node(num_cpus=1)
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address,
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})

    def executor_rate(self, steps, warmup):
        from ronde.ray import RayExecutor
        executor = RayExecutor(num_workers=2, placement_group_strategy="SPREAD")
        executor.start()
        try:
            return min(executor.run(digits_steps_per_s, args=(steps, warmup, "ronde")))
        finally:
            executor.shutdown()

    def torch_trainer_rate(self, steps, warmup):
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer
        trainer = TorchTrainer(_ddp_loop, train_loop_config={"steps": steps, "warmup": warmup},
                               scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                                            resources_per_worker={"CPU": 1}),
                               run_config=RunConfig(storage_path="/tmp/ronde-bench-ray-train"))
        return trainer.fit().metrics["rate"]

    def close(self):
        import ray
        ray.shutdown()
        self.cluster.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--worker", action="store_true", help="one rank under `ronde run`")
    parser.add_argument("--skip", default="", help="comma-separated: spark,ray,torchtrainer")
    args = parser.parse_args()
    if args.worker:
        print("RATE", digits_steps_per_s(args.steps, args.warmup, "ronde"), flush=True)
        return
    skip = set(filter(None, args.skip.split(",")))
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    spark = ray_engine = None
    try:
        spark = None if "spark" in skip else SparkEngine()
        ray_engine = None if skip >= {"ray", "torchtrainer"} else RayEngine()
        rates = measure(args, spark, ray_engine)
    finally:
        if spark:
            spark.close()
        if ray_engine:
            ray_engine.close()
    print("\n%d rounds of %d steps (after %d warm-up), batch 32 per rank, 2 ranks"
          % (args.rounds, args.steps, args.warmup))
    for name, values in rates.items():
        print("%-32s median %8.1f steps/s  (min %.1f, max %.1f)"
              % (name, statistics.median(values), min(values), max(values)))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


def measure(args, spark, ray_engine):
    """Interleaved rounds: each engine once per round, in the same order."""
    skip = set(filter(None, args.skip.split(",")))
    runs = [("ronde run -np 2", lambda: ronde_run_rate(args.steps, args.warmup)),
            ("ronde run -np 2 --bind-to none",
             lambda: ronde_run_rate(args.steps, args.warmup, "none"))]
    if spark:
        runs.append(("ronde.spark.run", lambda: spark.rate(args.steps, args.warmup)))
    if ray_engine and "ray" not in skip:
        runs.append(("RayExecutor", lambda: ray_engine.executor_rate(args.steps, args.warmup)))
    if ray_engine and "torchtrainer" not in skip:
        runs.append(("Ray Train TorchTrainer (DDP)",
                     lambda: ray_engine.torch_trainer_rate(args.steps, args.warmup)))
    rates = {name: [] for name, _ in runs}
    for round_index in range(args.rounds):
        for name, run in runs:
            rates[name].append(run())
            print("round %d  %-32s %8.1f steps/s  (load %.2f)"
                  % (round_index + 1, name, rates[name][-1], os.getloadavg()[0]), flush=True)
    return rates


if __name__ == "__main__":
    main()
