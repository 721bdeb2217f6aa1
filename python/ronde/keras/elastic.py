"""Elastic training for Keras with Horovod's API: ``hvd.elastic`` of ``horovod.keras`` and
``horovod.tensorflow.keras`` (``ronde.keras.elastic``, ``ronde.tensorflow.keras.elastic``).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.register_reset_callbacks([lambda: setattr(model.optimizer, "learning_rate",
                                                     lr * hvd.size())])
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=10)]

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, epochs=epochs - state.epoch, callbacks=callbacks)

    train(state)

The callbacks here derive from Keras 3's Callback (horovod.keras's are standalone Keras's);
ronde.tensorflow.keras.elastic has the same on tf.keras's Callback, which is tf_keras's (Keras
2) under TF_USE_LEGACY_KERAS=1. Their behaviour is the *Impl mixins below, as Horovod's
horovod/_keras/elastic.py. Nothing here needs TensorFlow: model and optimizer values cross ranks
as numpy arrays, so the state also works on Keras 3's torch and jax backends. See
docs/elastic.md.
"""

import sys

import keras
import numpy as np

from ronde.common import elastic as _common

HorovodInternalError = _common.HorovodInternalError
HostsUpdatedInterrupt = _common.HostsUpdatedInterrupt


def run(func):
    """Horovod's ``hvd.elastic.run``: decorates ``func(state, ...)``. Before each attempt the
    state is synced from a rank that holds it; a lost peer restores the last commit, a host
    update keeps it, and ``func`` runs again after the world re-formed. A failure of the
    runtime inside a compiled train step (a TensorFlow OpError naming it) counts as the
    runtime's own, as Horovod's ``run`` turns its ops' errors into HorovodInternalError."""
    return _common.run_fn(_common.raising_reset_errors(func, _common.tensorflow_op_error),
                          _common.numpy_collectives())


# --- model and optimizer state -----------------------------------------------------------

def _optimizer_variables(optimizer):
    # Keras 3 and Keras 2's optimizer: a list (Keras 2's is also callable); Keras 2's legacy
    # optimizer: a method, as in Horovod's time.
    variables = optimizer.variables
    if callable(variables) and not isinstance(variables, (list, tuple)):
        variables = variables()
    return list(variables)


def _build_optimizer(optimizer, model):
    """Makes the optimizer's slot variables now if it has none yet, so that every rank,
    including one that joins later, holds the same list before anything is broadcast."""
    if hasattr(optimizer, "_create_all_weights"):  # Keras 2's legacy optimizer
        optimizer._create_all_weights(model.trainable_variables)
    elif not (getattr(optimizer, "built", False) or getattr(optimizer, "_built", False)):
        optimizer.build(model.trainable_variables)


def _backend_of(model):
    """Keras 2's backend module for a Keras 2 model (its batch_get_value/batch_set_value
    read and write through its session in graph mode), else None."""
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None and isinstance(model, tf_keras.Model):
        return tf_keras.backend
    return None


class _Values:
    """Reads and writes a list of Keras variables as numpy arrays: through a Keras 2 backend
    where one is given (eager, or graph mode with its session), else as Keras 3 variables."""

    def __init__(self, backend):
        self._get = getattr(backend, "batch_get_value", None)
        self._set = getattr(backend, "batch_set_value", None)

    def read(self, variables):
        values = (self._get(variables) if self._get is not None
                  else [v.numpy() for v in variables])
        return [np.array(v, copy=True) for v in values]

    def write(self, variables, values):
        if len(variables) != len(values):
            raise ValueError("the state holds %d values for %d variables: were variables "
                             "created after the state was made?" % (len(values), len(variables)))
        if self._set is not None:
            self._set(list(zip(variables, values)))
            return
        for variable, value in zip(variables, values):
            variable.assign(value)


class TensorFlowKerasState(_common.ObjectState):
    """Horovod's ``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``: a
    Keras model's variables (``model.variables``) and its optimizer's, plus any picklable
    attribute given as a keyword (``epoch=0, batch=0``), committed together.

    ``optimizer`` defaults to the compiled one. ``backend``: for Keras 2 in graph mode, the
    Keras backend whose session reads and writes the variables (by default the model's own
    Keras 2 backend); Keras 3 runs eagerly and needs none.

    Differences from Horovod: the optimizer's slots are created when the state is made if
    they do not exist yet (Horovod's examples take a first step without allreduce for it), so
    that a worker joining later broadcasts the same variables as the survivors; sync() takes
    the state of the lowest rank that holds one (a survivor, see docs/elastic.md), not always
    rank 0's; a model that is not built, or no optimizer, is a ValueError at once.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        if optimizer is None:
            raise ValueError("TensorFlowKerasState needs an optimizer: pass optimizer= or "
                             "compile the model first")
        _build_optimizer(optimizer, model)
        self.model = model
        self.optimizer = optimizer
        self.backend = backend
        self._values = _Values(backend if backend is not None else _backend_of(model))
        self._save_model()
        super().__init__(_common.numpy_collectives(), **kwargs)

    def _variables(self):
        return list(self.model.variables), _optimizer_variables(self.optimizer)

    def _save_model(self):
        model_vars, optimizer_vars = self._variables()
        self._saved_model_state = self._values.read(model_vars)
        self._saved_optimizer_state = self._values.read(optimizer_vars)

    def _load_model(self):
        model_vars, optimizer_vars = self._variables()
        self._values.write(model_vars, self._saved_model_state)
        self._values.write(optimizer_vars, self._saved_optimizer_state)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        root = self.sync_root()
        model_vars, optimizer_vars = self._variables()
        everything = model_vars + optimizer_vars
        values = _common.broadcast_arrays(self._values.read(everything), root, "elastic.keras")
        self._values.write(everything, values)
        self._save_model()
        super().sync(root)


class KerasState(TensorFlowKerasState):
    """Horovod's ``hvd.elastic.KerasState(model, optimizer=None, **kwargs)``: a
    TensorFlowKerasState with the Keras in use as its backend."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


# --- callbacks ---------------------------------------------------------------------------

class CommitStateCallbackImpl:
    """CommitStateCallback's behaviour, for any Keras's Callback (Horovod's
    CommitStateCallbackImpl)."""

    def __init__(self, backend, state, batches_per_commit=1):
        if int(batches_per_commit) < 1:
            raise ValueError("batches_per_commit must be >= 1, not %r" % (batches_per_commit,))
        self.backend = backend
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        # Every rank of a re-formed world counts from here alike.
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self):
        """Commits the state (Horovod's hook: a subclass may log or do more around it)."""
        self.state.commit()


class UpdateBatchStateCallbackImpl:
    """UpdateBatchStateCallback's behaviour (Horovod's UpdateBatchStateCallbackImpl)."""

    def __init__(self, backend, state):
        self.backend = backend
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        params = self.params if self.params is not None else {}
        if params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = params["steps"]
            params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    """UpdateEpochStateCallback's behaviour (Horovod's UpdateEpochStateCallbackImpl, but
    counting from the first epoch that model.fit ran: see UpdateEpochStateCallback)."""

    def __init__(self, backend, state):
        self.backend = backend
        self.state = state
        self.initial_epoch = self.state.epoch
        self._first_epoch = None

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch
        self._first_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch is None:
            self._first_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        first = self._first_epoch if self._first_epoch is not None else epoch
        self.state.epoch = self.initial_epoch + (epoch - first) + 1


COMMIT_DOC = """Horovod's ``CommitStateCallback(state, batches_per_commit=1)``: commits `state` at
    the end of every `batches_per_commit`-th batch (counted across epochs, from each
    model.fit's start, so that every rank of a re-formed world commits at the same batches) and
    at the end of every epoch. Put it after the Update*StateCallbacks, which set what it
    commits. Difference: a `batches_per_commit` below 1 is a ValueError (Horovod then
    commits only at epoch ends)."""

BATCH_DOC = """Horovod's ``UpdateBatchStateCallback(state)``: `state.batch` is the index (from
    0) of the last batch finished in the epoch, and 0 again at each epoch's end.

    As Horovod does, at each epoch's start `params['steps']` is lowered by `state.batch`
    (the batches done before a reset) for the callbacks that read it. Keras 2.2 and later
    and Keras 3 take the number of steps from their data, not from `params`: the first
    epoch after a reset runs its full length, under Horovod as here. A script that must
    not repeat those batches starts its data at `state.batch` itself."""

EPOCH_DOC = """Horovod's ``UpdateEpochStateCallback(state)``: at each epoch's end `state.epoch`
    becomes the number of epochs finished in the whole training, across resets.

    Horovod adds Keras's epoch number to the `state.epoch` of when model.fit began, which
    fits Horovod's recipe ``model.fit(..., epochs=epochs - state.epoch)`` (Keras counts
    from 0). Difference: ronde counts from the first epoch that this model.fit ran, so that
    ``model.fit(..., initial_epoch=state.epoch, epochs=epochs)`` resumes right too (under
    Horovod that recipe would set the epoch to twice its value plus one)."""


class CommitStateCallback(CommitStateCallbackImpl, keras.callbacks.Callback):
    __doc__ = COMMIT_DOC

    def __init__(self, state, batches_per_commit=1):
        keras.callbacks.Callback.__init__(self)
        CommitStateCallbackImpl.__init__(self, keras.backend, state, batches_per_commit)


class UpdateBatchStateCallback(UpdateBatchStateCallbackImpl, keras.callbacks.Callback):
    __doc__ = BATCH_DOC

    def __init__(self, state):
        keras.callbacks.Callback.__init__(self)
        UpdateBatchStateCallbackImpl.__init__(self, keras.backend, state)


class UpdateEpochStateCallback(UpdateEpochStateCallbackImpl, keras.callbacks.Callback):
    __doc__ = EPOCH_DOC

    def __init__(self, state):
        keras.callbacks.Callback.__init__(self)
        UpdateEpochStateCallbackImpl.__init__(self, keras.backend, state)


__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt",
           "KerasState", "TensorFlowKerasState", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]
