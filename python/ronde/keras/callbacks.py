"""Horovod's `horovod.keras.callbacks` for Keras 3 on any backend (the behaviour lives in
callback_impl; this module gives it Keras 3's Callback classes)."""

import os
import tempfile

import keras

from ronde.common.process_sets import global_process_set
from ronde.keras import callback_impl as impl
from ronde.keras.keras3_access import KERAS3


class BroadcastGlobalVariablesCallback(impl.BroadcastGlobalVariablesImpl, keras.callbacks.Callback):
    """Horovod's `BroadcastGlobalVariablesCallback(root_rank, device='', local_variables=None)`:
    every rank trains from root_rank's weights; `local_variables` (a variable or several) keep
    each rank's own values. Differences: the model's variables are also broadcast when training
    begins (so the first step agrees too); `device` is accepted (ronde broadcasts on the host);
    keyword-only `process_set` broadcasts within a set."""

    def __init__(self, root_rank, device="", local_variables=None, *,
                 process_set=global_process_set):
        keras.callbacks.Callback.__init__(self)
        self._ronde_init(KERAS3, root_rank, device, local_variables, process_set)


class MetricAverageCallback(impl.MetricAverageImpl, keras.callbacks.Callback):
    """Horovod's `MetricAverageCallback(device='')`: each scalar metric in an epoch's logs
    becomes its average over the ranks. Put it before the callbacks that read metrics.
    Keyword-only `process_set` averages within a set."""

    def __init__(self, device="", *, process_set=global_process_set):
        keras.callbacks.Callback.__init__(self)
        self._ronde_init(device, process_set)


class LearningRateScheduleCallback(impl.LearningRateScheduleImpl, keras.callbacks.Callback):
    """Horovod's `LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0,
    end_epoch=None, staircase=True, momentum_correction=True, steps_per_epoch=None)`: see
    callback_impl.LearningRateScheduleImpl. The epoch's learning rate is logged as `lr`.
    Keras 3 compiles an optimizer's momentum into its train step, so momentum_correction
    cannot be applied there: it warns once instead."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        keras.callbacks.Callback.__init__(self)
        self._ronde_init(KERAS3, initial_lr, multiplier, start_epoch, end_epoch, staircase,
                         momentum_correction, steps_per_epoch)


class LearningRateWarmupCallback(impl.LearningRateWarmupImpl, keras.callbacks.Callback):
    """Horovod's `LearningRateWarmupCallback(initial_lr, warmup_epochs=5,
    momentum_correction=True, steps_per_epoch=None, verbose=0)`: the learning rate grows batch
    by batch from initial_lr / size to initial_lr (the rate already scaled by the number of
    ranks) over warmup_epochs (Goyal et al.)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        keras.callbacks.Callback.__init__(self)
        self._ronde_init(KERAS3, initial_lr, warmup_epochs, momentum_correction,
                         steps_per_epoch, verbose)


def default_checkpoint_path(weights_only=False):
    name = "best_model.weights.h5" if weights_only else "best_model.keras"
    return os.path.join(tempfile.mkdtemp(prefix="ronde_best_"), name)


class BestModelCheckpoint(impl.RankZeroWritesImpl, keras.callbacks.ModelCheckpoint):
    """Horovod's `horovod.keras.callbacks.BestModelCheckpoint(monitor='val_loss', verbose=0,
    mode='auto', save_freq='epoch')`: keeps the best model so far (save_best_only).
    Differences: only rank 0 writes; Horovod leaves `filepath` to be set on the object, here
    keyword-only `filepath` names it, default a new temporary folder's `best_model.keras`."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch", *,
                 filepath=None):
        super().__init__(filepath=filepath or default_checkpoint_path(), monitor=monitor,
                         verbose=verbose, save_best_only=True, save_weights_only=False,
                         mode=mode, save_freq=save_freq)
