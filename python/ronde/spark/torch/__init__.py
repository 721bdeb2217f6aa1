"""Horovod's horovod.spark.torch: TorchEstimator and TorchModel over a ronde.spark Store."""

from ronde.spark.store import LocalStore, Store
from ronde.spark.torch.estimator import TorchEstimator, TorchModel

__all__ = ["LocalStore", "Store", "TorchEstimator", "TorchModel"]
