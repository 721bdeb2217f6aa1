"""What Horovod's Keras callbacks do (horovod/_keras/callbacks.py), written once for both Keras
worlds: each world's callbacks module mixes these into its own `Callback` class and passes an
accessor (ronde.keras.keras3_access, ronde.tensorflow.keras.keras2_access) that reads and
writes its variables and hyperparameters. Values cross ranks as numpy arrays through ronde's
runtime, so the same code runs eagerly, under any backend, and in TF1 graph mode."""

import warnings

import numpy as np

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set


def broadcast_values(access, variables, root_rank, name, process_set=global_process_set):
    """Assigns root_rank's values to `variables`; all are submitted before any is waited for."""
    variables = list(variables)
    if not variables:
        return
    values = access.read(variables)
    pending = [nops.broadcast(np.asarray(value), root_rank, "%s.%d" % (name, i), process_set)
               for i, value in enumerate(values)]
    access.assign(variables, [p.wait() for p in pending])


def local_variable_set(access, local_variables):
    """Horovod's check of `local_variables`: None, one variable, or variables."""
    if local_variables is None:
        return []
    if access.is_variable(local_variables):
        return [local_variables]
    local_variables = list(local_variables)
    if not all(access.is_variable(v) for v in local_variables):
        raise ValueError("All local variables must be of tf.Variable type.")
    return local_variables


class BroadcastGlobalVariablesImpl:
    """Every rank starts from root_rank's state: the model's variables when training begins
    (Horovod does not; it makes the first step agree too), and the model's and the
    optimizer's after the first batch, when the optimizer has made its own (as Horovod)."""

    def _ronde_init(self, access, root_rank, device, local_variables, process_set):
        self._access = access
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.broadcast_done = False
        self._local = {}
        for var in local_variable_set(access, local_variables):
            self.register_local_var(var)

    def register_local_var(self, var):
        """Horovod's `register_local_var`: `var` keeps this rank's value (not broadcast)."""
        self._local[id(var)] = var

    def _shared(self, variables):
        return [v for v in variables if id(v) not in self._local]

    def on_train_begin(self, logs=None):
        broadcast_values(self._access, self._shared(self._access.model_variables(self.model)),
                         self.root_rank, "keras.model_start", self.process_set)

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        access = self._access
        broadcast_values(access, self._shared(access.model_variables(self.model)),
                         self.root_rank, "keras.model", self.process_set)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            broadcast_values(access, self._shared(access.optimizer_variables(optimizer)),
                             self.root_rank, "keras.optimizer", self.process_set)
        self.broadcast_done = True


class MetricAverageImpl:
    """At the end of every epoch each scalar in `logs` becomes its average over the ranks (one
    fused request, keys sorted so that every rank sends them in the same order)."""

    def _ronde_init(self, device, process_set):
        self.device = device
        self.process_set = process_set

    def _average_metrics_in_place(self, logs, epoch):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = nops.allreduce(values, "keras.metrics.%d" % epoch, nops.Average,
                                  process_set=self.process_set).wait()
        for key, value in zip(keys, averaged):
            logs[key] = float(value)

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs, epoch)


class LearningRateScheduleImpl:
    """Horovod's schedule: from start_epoch to end_epoch (exclusive) the learning rate is
    initial_lr * multiplier(epoch), where a constant multiplier m means m ** (epoch -
    start_epoch). staircase: set at each epoch's first batch with the integer epoch;
    otherwise at every batch with epoch + batch / steps_per_epoch. momentum_correction scales
    the momentum by new_lr / old_lr for the batch that follows a change and restores it
    after."""

    def _ronde_init(self, access, initial_lr, multiplier, start_epoch, end_epoch, staircase,
                    momentum_correction, steps_per_epoch):
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self._access = access
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.restore_momentum = None
        self.current_epoch = None
        self._warned = False
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self):
        params = self.params or {}
        if params.get("steps"):
            return params["steps"]
        if params.get("samples") and params.get("batch_size"):
            return params["samples"] // params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify "
                         "the steps_per_epoch parameter to the %s()." % type(self).__name__)

    def _adjust_learning_rate(self, epoch):
        access, optimizer = self._access, self.model.optimizer
        old_lr = access.learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        access.set_learning_rate(optimizer, new_lr)
        if not self.momentum_correction or not hasattr(optimizer, "momentum"):
            return
        if not access.momentum_is_variable(optimizer):
            if optimizer.momentum and not self._warned:
                warnings.warn("%s: momentum_correction is not applied: this optimizer's "
                              "momentum is a constant of its compiled step"
                              % type(self).__name__)
                self._warned = True
            return
        if old_lr:
            self.restore_momentum = access.momentum(optimizer)
            access.set_momentum(optimizer, self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self._access.set_momentum(self.model.optimizer, self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch
                or (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = self._access.learning_rate(self.model.optimizer)


class LearningRateWarmupImpl(LearningRateScheduleImpl):
    """Horovod's warmup (Goyal et al.): from initial_lr / size to initial_lr over warmup_epochs,
    batch by batch, the epoch shifted by one batch so that the last batch reaches
    initial_lr."""

    def _ronde_init(self, access, initial_lr, warmup_epochs, momentum_correction,
                    steps_per_epoch, verbose):
        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch
            size = _core.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super()._ronde_init(access, initial_lr, multiplier, 0, warmup_epochs, False,
                            momentum_correction, steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _core.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, self._access.learning_rate(self.model.optimizer)))


class RankZeroWritesImpl:
    """Mixed before a ModelCheckpoint: only rank 0 writes (every rank may carry the callback)."""

    def on_train_batch_end(self, batch, logs=None):
        if _core.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if _core.rank() == 0:
            super().on_epoch_end(epoch, logs)
