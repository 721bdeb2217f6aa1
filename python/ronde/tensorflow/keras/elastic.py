"""Elastic training with Horovod's ``horovod.tensorflow.keras.elastic`` API for tf.keras
(``ronde.tensorflow.keras.elastic``): the states and run() of ronde.keras.elastic, and the
callbacks on tf.keras's own Callback: Keras 3's (then they are ronde.keras.elastic's very
classes), or tf_keras's (Keras 2) under TF_USE_LEGACY_KERAS=1. KerasState reads and writes
through tf.keras's backend. See ronde/keras/elastic.py and docs/elastic.md."""

import tensorflow as tf

from ronde.keras import elastic as _elastic
from ronde.keras.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                                 TensorFlowKerasState, run)
from ronde.tensorflow.keras.world import tf_keras_is_keras2

if not tf_keras_is_keras2():
    from ronde.keras.elastic import (CommitStateCallback, KerasState,  # noqa: F401
                                     UpdateBatchStateCallback, UpdateEpochStateCallback)
else:
    _keras = tf.keras

    class KerasState(TensorFlowKerasState):
        """Horovod's ``KerasState(model, optimizer=None, **kwargs)``: a TensorFlowKerasState
        with tf.keras's (tf_keras's) backend."""

        def __init__(self, model, optimizer=None, **kwargs):
            super().__init__(model, optimizer=optimizer, backend=_keras.backend, **kwargs)

    class CommitStateCallback(_elastic.CommitStateCallbackImpl, _keras.callbacks.Callback):
        __doc__ = _elastic.COMMIT_DOC

        def __init__(self, state, batches_per_commit=1):
            _keras.callbacks.Callback.__init__(self)
            _elastic.CommitStateCallbackImpl.__init__(self, _keras.backend, state,
                                                      batches_per_commit)

    class UpdateBatchStateCallback(_elastic.UpdateBatchStateCallbackImpl,
                                   _keras.callbacks.Callback):
        __doc__ = _elastic.BATCH_DOC

        def __init__(self, state):
            _keras.callbacks.Callback.__init__(self)
            _elastic.UpdateBatchStateCallbackImpl.__init__(self, _keras.backend, state)

    class UpdateEpochStateCallback(_elastic.UpdateEpochStateCallbackImpl,
                                   _keras.callbacks.Callback):
        __doc__ = _elastic.EPOCH_DOC

        def __init__(self, state):
            _keras.callbacks.Callback.__init__(self)
            _elastic.UpdateEpochStateCallbackImpl.__init__(self, _keras.backend, state)


__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt", "KerasState",
           "TensorFlowKerasState", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
           "run"]
