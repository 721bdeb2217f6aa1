"""ronde on Spark: ``ronde.spark.run`` (Horovod's horovod.spark.run) and, in
``ronde.spark.torch``, the TorchEstimator over a Parquet ``Store``. See docs/spark.md."""

from ronde.spark.runner import run

__all__ = ["run"]
