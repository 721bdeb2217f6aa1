"""Horovod's horovod.spark.keras: KerasEstimator and KerasModel (Keras 3, torch or tensorflow
backend) over a ronde.spark Store. Set KERAS_BACKEND before Keras is first imported."""

from ronde.spark.keras.estimator import KerasEstimator, KerasModel
from ronde.spark.store import LocalStore, Store

__all__ = ["KerasEstimator", "KerasModel", "LocalStore", "Store"]
