"""Horovod's Keras callbacks for Keras 3 on any backend: values cross ranks as numpy arrays
through ronde's runtime (ronde.common.numpy_ops), so no callback depends on the backend."""

import os
import tempfile
import warnings

import keras
import numpy as np

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set


def broadcast_keras_variables(variables, root_rank, name, process_set=global_process_set):
    """Assigns root_rank's values to Keras variables; all are submitted before any wait."""
    variables = list(variables)
    pending = [nops.broadcast(np.asarray(keras.ops.convert_to_numpy(v.value)), root_rank,
                              "%s.%d.%s" % (name, i, getattr(v, "path", v.name)), process_set)
               for i, v in enumerate(variables)]
    for v, p in zip(variables, pending):
        v.assign(p.wait())


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Horovod's `BroadcastGlobalVariablesCallback(root_rank, device='')`: every rank starts
    training from root_rank's weights. The model's variables are broadcast when training
    begins, and the model's and the optimizer's once more after the first batch, when the
    optimizer has made its own variables (as Horovod does)."""

    def __init__(self, root_rank=0, device="", process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        broadcast_keras_variables(self.model.variables, self.root_rank, "keras.model_start",
                                  self.process_set)

    def on_train_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        broadcast_keras_variables(self.model.variables, self.root_rank, "keras.model",
                                  self.process_set)
        if self.model.optimizer is not None:
            broadcast_keras_variables(self.model.optimizer.variables, self.root_rank,
                                      "keras.optimizer", self.process_set)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Horovod's `MetricAverageCallback()`: at the end of every epoch each metric in `logs` is
    replaced by its average over the ranks. Put it before the callbacks that read metrics
    (checkpointing, early stopping, schedules on a metric)."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.process_set = process_set

    def _average(self, logs, epoch):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = nops.allreduce(values, "keras.metrics.%d" % epoch, nops.Average,
                                  process_set=self.process_set).wait()
        for k, v in zip(keys, averaged):
            logs[k] = float(v)

    def on_epoch_end(self, epoch, logs=None):
        self._average(logs, epoch)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Horovod's `LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0,
    end_epoch=None, staircase=True, momentum_correction=True, steps_per_epoch=None,
    verbose=0)`: from start_epoch to end_epoch the learning rate is initial_lr *
    multiplier(epoch) (multiplier: a constant or a function of the epoch). staircase sets it
    at each epoch's start; otherwise at every batch, with a fractional epoch.

    momentum_correction: Keras 3 compiles an optimizer's momentum into the train step as a
    constant, so it cannot be rescaled per batch; with a momentum optimizer and the
    correction asked for, a warning says it is not applied."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = None
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self._warned = False

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch):
        lr = self.initial_lr * self.multiplier(epoch)
        self.model.optimizer.learning_rate = lr
        return lr

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        momentum = getattr(self.model.optimizer, "momentum", 0.0)
        if self.momentum_correction and momentum and not self._warned:
            warnings.warn("LearningRateScheduleCallback: momentum_correction is not applied "
                          "on Keras 3 (the momentum is a constant of the compiled step)")
            self._warned = True

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            lr = self._set(epoch)
            if self.verbose and _core.rank() == 0:
                print("Epoch %d: LearningRateScheduleCallback set learning rate to %g."
                      % (epoch + 1, lr))

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._in_range(self.current_epoch):
            return
        if not self.steps_per_epoch:
            raise ValueError("LearningRateScheduleCallback with staircase=False needs "
                             "steps_per_epoch (model.fit did not report it)")
        self._set(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(
                self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's `LearningRateWarmupCallback(initial_lr, warmup_epochs=5,
    momentum_correction=True, steps_per_epoch=None, verbose=0)`: the learning rate grows
    batch by batch from initial_lr / size to initial_lr over warmup_epochs (Goyal et al.),
    where initial_lr is the rate already scaled by the number of ranks."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0, process_set=global_process_set):
        size = process_set.size()

        def multiplier(epoch):
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            self.model.optimizer.learning_rate = self.initial_lr
            if self.verbose and _core.rank() == 0:
                print("Epoch %d: finished gradual learning rate warmup to %g."
                      % (epoch + 1, self.initial_lr))
        super().on_epoch_end(epoch, logs)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's `BestModelCheckpoint(monitor='val_loss', verbose=0, mode='auto',
    save_freq='epoch')`: keeps the best model seen so far (save_best_only). Only rank 0
    writes; other ranks may carry the callback too. Without `filepath` a file in a new
    temporary folder is used (`best_model.keras`)."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch",
                 filepath=None):
        if filepath is None:
            filepath = os.path.join(tempfile.mkdtemp(prefix="ronde_best_"), "best_model.keras")
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=False, mode=mode,
                         save_freq=save_freq)

    def on_train_batch_end(self, batch, logs=None):
        if _core.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if _core.rank() == 0:
            super().on_epoch_end(epoch, logs)
