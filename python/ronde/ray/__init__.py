"""ronde on Ray: ``RayExecutor`` (Horovod's horovod.ray.RayExecutor). See docs/ray.md."""

from ronde.ray.runner import RayExecutor, RaySettings

__all__ = ["RayExecutor", "RaySettings"]
