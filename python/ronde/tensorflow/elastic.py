"""Elastic training for TensorFlow with Horovod's API: ``hvd.elastic`` of
``horovod.tensorflow`` (``ronde.tensorflow.elastic``).

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, steps_per_epoch):
                train_step(...)                    # DistributedGradientTape inside
                if state.batch % commit_every == 0:
                    state.commit()
            state.batch = 0

    train(state)

TF2 runs eagerly or in tf.functions; TF1-style graph code (tf.compat.v1, a Session) works with
``TensorFlowState(variables, session)``, and with Keras 2 (tf_keras) through
``TensorFlowKerasState(model, optimizer, backend)``. Values cross ranks as numpy arrays
through ronde's runtime. See docs/elastic.md.
"""

import numpy as np
import tensorflow as tf

from ronde.common import elastic as _common
from ronde.tensorflow.functions import (broadcast_object, broadcast_object_fn,  # noqa: F401
                                        broadcast_variables)

HorovodInternalError = _common.HorovodInternalError
HostsUpdatedInterrupt = _common.HostsUpdatedInterrupt


def __getattr__(name):
    # TensorFlowKerasState lives with the Keras states (ronde.keras.elastic) and imports Keras:
    # resolved on first use, so that TF1 graph code with TensorFlowState needs no Keras.
    if name == "TensorFlowKerasState":
        from ronde.keras.elastic import TensorFlowKerasState
        return TensorFlowKerasState
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def run(func):
    """Horovod's ``hvd.elastic.run``: decorates ``func(state, ...)``. Before each attempt the
    state is synced from a rank that holds it; a lost peer restores the last commit, a host
    update keeps it, and ``func`` runs again after the world re-formed.

    Inside a tf.function a failure of the runtime reaches Python as a tf.errors.OpError
    naming it; as Horovod's ``run`` turns its ops' errors into HorovodInternalError, such an
    error counts as the runtime's own (PeerLostError, AbortedError, TimeoutError). Other
    errors are raised as they are."""
    return _common.run_fn(_common.raising_reset_errors(func, _common.tensorflow_op_error),
                          _common.numpy_collectives())


def _session(session, what):
    found = session if session is not None else tf.compat.v1.get_default_session()
    if found is None:
        raise ValueError("%s in graph mode needs a session: pass session= or run it inside "
                         "`with session.as_default():`" % what)
    return found


class ObjectState(_common.ObjectState):
    """Horovod's ``ObjectState(bcast_object, get_rank, **kwargs)``: picklable attributes
    given as keywords, committed together and synced by broadcast.

    `bcast_object(obj)` (e.g. ``hvd.broadcast_object`` or a ``broadcast_object_fn``) sends
    rank 0's object, as Horovod calls it; in a world whose lowest survivor is not rank 0
    it is called as ``bcast_object(obj, root_rank=r)``. `get_rank` is the rank function
    the state uses. Difference: both may be left out (ronde's own are used)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        broadcast = None
        if bcast_object is not None:
            def broadcast(obj, root):
                return bcast_object(obj) if root == 0 else bcast_object(obj, root_rank=root)
        super().__init__(_common.numpy_collectives(broadcast, get_rank), **kwargs)


class TensorFlowState(_common.ObjectState):
    """Horovod's ``TensorFlowState(variables=None, session=None, **kwargs)``: a list of
    tf.Variables (default: ``tf.compat.v1.global_variables()``) plus any picklable attribute
    given as a keyword, committed together.

    Eagerly the variables are read and assigned directly. In graph mode (TF1-style code)
    they are read and assigned through `session` (default: the default session at each
    use); the assignments are built once, here, so nothing is added to the graph later.

    Differences from Horovod: sync() broadcasts the variables in eager mode too (Horovod
    broadcasts them once, when the state is made, which a worker joining later does alone),
    from the lowest rank that holds the state (a survivor, see docs/elastic.md)."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables or tf.compat.v1.global_variables())
        self.session = session
        self._graph = not tf.executing_eagerly()
        if self._graph and self.variables:
            with self.variables[0].graph.as_default():
                self._feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                               for v in self.variables]
                self._assign = tf.group(*[v.assign(p)
                                          for v, p in zip(self.variables, self._feeds)])
        self._save_model()
        super().__init__(_common.numpy_collectives(), **kwargs)

    def _read(self):
        if not self.variables:
            return []
        if self._graph:
            values = _session(self.session, "TensorFlowState").run(self.variables)
        else:
            values = [v.numpy() for v in self.variables]
        return [np.array(v, copy=True) for v in values]

    def _write(self, values):
        if not self.variables:
            return
        if self._graph:
            _session(self.session, "TensorFlowState").run(
                self._assign, feed_dict=dict(zip(self._feeds, values)))
            return
        for variable, value in zip(self.variables, values):
            variable.assign(value)

    def _save_model(self):
        self._values = self._read()

    def _load_model(self):
        self._write(self._values)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        root = self.sync_root()
        self._write(_common.broadcast_arrays(self._read(), root, "elastic.tensorflow"))
        self._save_model()
        super().sync(root)


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "TensorFlowKerasState", "TensorFlowState", "broadcast_object", "broadcast_object_fn",
           "broadcast_variables", "run"]
