"""ronde on Ray: ``RayExecutor`` and ``ElasticRayExecutor`` (Horovod's horovod.ray).
See docs/ray.md."""

from ronde.ray.elastic_executor import ElasticRayExecutor, ElasticRaySettings
from ronde.ray.runner import RayExecutor, RaySettings

__all__ = ["ElasticRayExecutor", "ElasticRaySettings", "RayExecutor", "RaySettings"]
