"""A Ray 'cluster' on this machine: ray.cluster_utils.Cluster with a head (no CPUs, so no
worker lands there) and two worker nodes of one CPU each."""

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


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
