"""ronde on Ray: ``RayExecutor`` and ``ElasticRayExecutor`` (Horovod's horovod.ray), and
``DistributedTrainableCreator`` for Ray Tune (ronde.ray.tune). See docs/ray.md."""

from ronde.ray.elastic_executor import ElasticRayExecutor, ElasticRaySettings
from ronde.ray.runner import RayExecutor, RaySettings
from ronde.ray import ray_logger  # noqa: F401  (Horovod: from horovod.ray import ray_logger)
from ronde.ray.tune import DistributedTrainableCreator

__all__ = ["DistributedTrainableCreator", "ElasticRayExecutor", "ElasticRaySettings", "RayExecutor",
           "RaySettings"]
