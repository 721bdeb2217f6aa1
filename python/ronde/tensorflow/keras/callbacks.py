"""Horovod's `horovod.tensorflow.keras.callbacks` on whatever tf.keras is: the classes subclass
tf.keras's own Callback (Keras 3's, or tf_keras's under TF_USE_LEGACY_KERAS=1), and the
behaviour is ronde.keras.callback_impl's, which works eagerly and in TF1 graph mode."""

import os
import tempfile

import tensorflow as tf

from ronde.common.process_sets import global_process_set
from ronde.keras import callback_impl as impl
from ronde.tensorflow.keras.world import tf_keras_is_keras2

_keras = tf.keras
if tf_keras_is_keras2():
    from ronde.tensorflow.keras.keras2_access import Keras2Access
    _ACCESS = Keras2Access(_keras)
else:
    from ronde.keras.keras3_access import KERAS3 as _ACCESS


class BroadcastGlobalVariablesCallback(impl.BroadcastGlobalVariablesImpl,
                                       _keras.callbacks.Callback):
    """Horovod's `BroadcastGlobalVariablesCallback(root_rank, device='', local_variables=None)`:
    every rank trains from root_rank's weights; `local_variables` (a tf.Variable or several)
    keep each rank's own values (also in TF1 graph mode, where Horovod broadcasts every global
    variable). Differences: the model's variables are also broadcast when training begins (so
    the first step agrees too); the optimizer's after the first batch, in both modes; `device`
    is accepted (ronde broadcasts on the host); keyword-only `process_set`."""

    def __init__(self, root_rank, device="", local_variables=None, *,
                 process_set=global_process_set):
        _keras.callbacks.Callback.__init__(self)
        self._ronde_init(_ACCESS, root_rank, device, local_variables, process_set)


class MetricAverageCallback(impl.MetricAverageImpl, _keras.callbacks.Callback):
    """Horovod's `MetricAverageCallback(device='')`: each scalar metric in an epoch's logs
    becomes its average over the ranks. Put it before the callbacks that read metrics.
    Keyword-only `process_set` averages within a set."""

    def __init__(self, device="", *, process_set=global_process_set):
        _keras.callbacks.Callback.__init__(self)
        self._ronde_init(device, process_set)


class LearningRateScheduleCallback(impl.LearningRateScheduleImpl, _keras.callbacks.Callback):
    """Horovod's `LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0,
    end_epoch=None, staircase=True, momentum_correction=True, steps_per_epoch=None)` (see
    ronde.keras.callback_impl). momentum_correction applies where the momentum is a variable
    (tf_keras's legacy optimizers); where it is a constant of the compiled step (Keras 3,
    tf_keras's new optimizers) it warns once instead."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        _keras.callbacks.Callback.__init__(self)
        self._ronde_init(_ACCESS, initial_lr, multiplier, start_epoch, end_epoch, staircase,
                         momentum_correction, steps_per_epoch)


class LearningRateWarmupCallback(impl.LearningRateWarmupImpl, _keras.callbacks.Callback):
    """Horovod's `LearningRateWarmupCallback(initial_lr, warmup_epochs=5,
    momentum_correction=True, steps_per_epoch=None, verbose=0)`: from initial_lr / size to
    initial_lr over warmup_epochs, batch by batch (Goyal et al.)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        _keras.callbacks.Callback.__init__(self)
        self._ronde_init(_ACCESS, initial_lr, warmup_epochs, momentum_correction,
                         steps_per_epoch, verbose)


def _default_path(weights_only):
    if tf_keras_is_keras2():
        name = "best_model.h5"
    else:
        name = "best_model.weights.h5" if weights_only else "best_model.keras"
    return os.path.join(tempfile.mkdtemp(prefix="ronde_best_"), name)


class BestModelCheckpoint(impl.RankZeroWritesImpl, _keras.callbacks.ModelCheckpoint):
    """Horovod's `horovod.tensorflow.keras.callbacks.BestModelCheckpoint(monitor='val_loss',
    verbose=0, save_weights_only=False, mode='auto', save_freq='epoch')`: keeps the best model
    so far (save_best_only). Differences: only rank 0 writes; Horovod leaves `filepath` to be
    set on the object, here keyword-only `filepath` names it, default a file in a new
    temporary folder (`best_model.h5` on tf_keras; on Keras 3 `best_model.keras`, or
    `best_model.weights.h5` with save_weights_only)."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", *, filepath=None):
        super().__init__(filepath=filepath or _default_path(save_weights_only), monitor=monitor,
                         verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
