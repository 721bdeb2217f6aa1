#!/usr/bin/env python3
"""Job start-up time, from the call that starts a 2-rank job to its first collective done, on
Spark (ronde.spark.run on local-cluster[2,1,1024]), Ray (RayExecutor on a head + 2-node
ray.cluster_utils.Cluster) and `ronde run`. The engines' own start-up (SparkSession, Ray
cluster) is outside the timing: users start a job on a running cluster.

    .venv-engines/bin/python bench/engines_startup.py [--repeats 3]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

FIRST_COLLECTIVE = """
import time, torch, ronde.torch as hvd
hvd.init()
hvd.allreduce(torch.ones(1), name="first")
print("FIRST_COLLECTIVE_DONE", time.time(), flush=True)
"""


def first_collective():
    import time as clock
    import torch
    import ronde.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(1), name="first")
    done = clock.time()
    hvd.shutdown()
    return done


def time_ronde_run():
    ronde = os.path.join(os.path.dirname(sys.executable), "ronde")
    started = time.time()
    out = subprocess.run([ronde, "run", "-np", "2", sys.executable, "-c", FIRST_COLLECTIVE],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    done = [float(line.split()[-1]) for line in out.splitlines() if "FIRST_COLLECTIVE_DONE" in line]
    return max(done) - started


def time_spark(repeats):
    from pyspark.sql import SparkSession
    import ronde.spark
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").getOrCreate())
    sc = session.sparkContext
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:
        time.sleep(0.2)
    times = []
    for _ in range(repeats + 1):  # the first run warms the executors' Python workers
        started = time.time()
        done = ronde.spark.run(first_collective, num_proc=2, verbose=0)
        times.append(max(done) - started)
    session.stop()
    return times[1:], times[0]


def time_ray(repeats):
    import ray
    from ray.cluster_utils import Cluster
    from ronde.ray import RayExecutor
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    times = []
    for _ in range(repeats + 1):
        started = time.time()
        executor = RayExecutor(num_workers=2, placement_group_strategy="SPREAD")
        executor.start()
        done = executor.run(first_collective)
        times.append(max(done) - started)
        executor.shutdown()
    ray.shutdown()
    cluster.shutdown()
    return times[1:], times[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    ronde_run = [time_ronde_run() for _ in range(args.repeats)]
    spark, spark_first = time_spark(args.repeats)
    ray_times, ray_first = time_ray(args.repeats)
    for name, values in (("ronde run", ronde_run), ("ronde.spark.run", spark),
                         ("RayExecutor start+run", ray_times)):
        print("%-22s median %.2f s  (runs: %s)" % (name, statistics.median(values),
                                                   ", ".join("%.2f" % v for v in values)))
    print("first (cold) run: spark %.2f s, ray %.2f s" % (spark_first, ray_first))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
