"""Elastic training with Horovod's ``horovod.tensorflow.keras.elastic`` API for tf.keras
(``ronde.tensorflow.keras.elastic``): ronde.keras.elastic, whose callbacks derive from the
Callback class of the Keras that tf.keras names (Keras 3, or Keras 2 from tf_keras under
TF_USE_LEGACY_KERAS=1). See ronde/keras/elastic.py and docs/elastic.md."""

from ronde.keras.elastic import (CommitStateCallback, HorovodInternalError,  # noqa: F401
                                 HostsUpdatedInterrupt, KerasState, TensorFlowKerasState,
                                 UpdateBatchStateCallback, UpdateEpochStateCallback, run)

__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt", "KerasState",
           "TensorFlowKerasState", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
           "run"]
