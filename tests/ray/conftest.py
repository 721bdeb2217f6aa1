"""A Ray 'cluster' on this machine: ray.cluster_utils.Cluster with a head (no CPUs, so no
worker lands there) and two worker nodes of one CPU each."""

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray's raylets start workers at nice 15, and the training runs inside them: beside anything
# else busy on the machine (a build, another suite) the workers then get a few percent of a
# core, and the elastic test saw no step in 60 s (passing in 16 s alone). The tests time what
# ronde does, not what the scheduler leaves to a nice-15 process, so they run at the parent's.
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture(scope="module")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()
