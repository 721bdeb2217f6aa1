"""Elastic training, framework-neutral: Horovod's ``horovod.common.elastic`` on ronde.

The model (docs/elastic.md): training state lives in a ``State`` that is committed now and
then (an in-memory copy). When a peer is lost every rank's pending collectives fail; the
``run`` loop restores the last commit, shuts the runtime down and joins the driver's next
world (a new generation: other size, other hosts), where every rank takes the state of a
rank that has one (``sync``). When the driver adds hosts, running ranks learn it at their
next ``commit()`` or ``check_host_updates()`` (``HostsUpdatedInterrupt``) and re-form the
same way, without losing anything, since they have just committed.

A frontend supplies the collectives through ``Collectives``; nothing here knows a tensor.
"""

import functools

import numpy as np

from ronde import _core

# Horovod's name for what the reset loop recovers from: a lost peer, an aborted communicator,
# a collective timing out (PeerLostError, AbortedError and TimeoutError derive from it). A
# mismatch or a bad argument is a bug in the script and is raised as it is.
HorovodInternalError = _core.HorovodInternalError
_RESET_ERRORS = HorovodInternalError
# How many times in a row the runtime may fail to form before run() gives up; the driver's
# --reset-limit and --elastic-timeout bound the job as a whole.
_INIT_ATTEMPTS = 5


class HostsUpdatedInterrupt(RuntimeError):
    """The driver changed the world (hosts added or removed): raised by commit() and
    check_host_updates() on every rank at once. Horovod's name and meaning; ``skip_sync``
    is kept for compatibility and is always False here (every new world is synced)."""

    def __init__(self, skip_sync=False):
        super().__init__("the elastic driver published a new world")
        self.skip_sync = skip_sync


class Collectives:
    """What State needs from a frontend. `broadcast_object(obj, root)`, `allgather_object(obj)`
    (a list, one entry per rank) and `allreduce_max(int) -> int` run on the current world; `rank()`/`size()` as usual;
    `init()`/`shutdown()` join and leave the job."""

    def __init__(self, broadcast_object, allgather_object, allreduce_max, rank, size, init,
                 shutdown):
        self.broadcast_object = broadcast_object
        self.allgather_object = allgather_object
        self.allreduce_max = allreduce_max
        self.rank = rank
        self.size = size
        self.init = init
        self.shutdown = shutdown


def numpy_collectives(broadcast_object=None, rank=None):
    """Collectives on numpy arrays and pickled objects (ronde.common's numpy bridge), for the
    frontends whose state needs no framework tensor to cross ranks (TensorFlow, Keras).
    `broadcast_object(obj, root)` and `rank()` replace ronde's own where given."""
    from ronde.common import basics, objects
    from ronde.common import numpy_ops as nops

    def allreduce_max(value):
        out = nops.allreduce(np.array([int(value)], dtype=np.int64), "allreduce.elastic.max",
                             nops.Max).wait()
        return int(out[0])

    if broadcast_object is None:
        def broadcast_object(obj, root):
            return objects.broadcast_object(obj, root, name="elastic.state")
    return Collectives(
        broadcast_object=broadcast_object,
        allgather_object=lambda obj: objects.allgather_object(obj, name="elastic.gather"),
        allreduce_max=allreduce_max, rank=rank or _core.rank, size=_core.size,
        init=basics.init, shutdown=basics.shutdown)


def broadcast_arrays(arrays, root, name):
    """Root's copy of every numpy array, in the arrays' own shapes. All are submitted before
    any is waited for, so the runtime fuses them."""
    from ronde.common import numpy_ops as nops
    arrays = [np.asarray(a) for a in arrays]
    pending = [nops.broadcast(a, root, "broadcast.%s.%d" % (name, i))
               for i, a in enumerate(arrays)]
    # The bridge hands 0-d arrays over as 1-d (a scalar variable's value, e.g. a step count).
    return [p.wait().reshape(a.shape) for p, a in zip(pending, arrays)]


def _recoverable(error):
    """A HorovodInternalError the reset loop recovers from: not a mismatch (the ranks
    disagreeing is the script's bug, which every retry from the last commit repeats)."""
    return isinstance(error, _RESET_ERRORS) and not isinstance(error, _core.MismatchError)


def reset_error_in(error, translate=None):
    """The failure that the reset loop recovers from (a lost peer, an aborted communicator, a
    timeout) that `error` is or carries (as its __cause__ or __context__), as ronde's
    exception; None if it carries none. `translate(error)` is the frontend's reading of a
    framework's own error (ronde.tensorflow.errors.from_op_error for the OpError of a
    tf.function or Keras's compiled train step, which names the runtime's failure only in its
    message): ronde's exception for it, or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _recoverable(error):
            return error
        if translate is not None:
            found = translate(error)
            if _recoverable(found):
                return found
        error = error.__cause__ or error.__context__
    return None


def tensorflow_op_error(error):
    """ronde's exception for a tf.errors.OpError that a ronde kernel raised inside a
    tf.function, a Session or Keras's compiled train step (its message holds "ronde <Code>:
    "; ronde.tensorflow.errors.from_op_error reads it), else None: the `translate` of
    reset_error_in for the TensorFlow and Keras frontends. TensorFlow is not imported here:
    an OpError exists only where it already is."""
    import sys
    tf = sys.modules.get("tensorflow")
    op_error = getattr(getattr(tf, "errors", None), "OpError", None)
    if op_error is None or not isinstance(error, op_error):
        return None
    from ronde.tensorflow.errors import from_op_error
    return from_op_error(error)


def raising_reset_errors(func, translate=None):
    """`func` with a runtime failure that another framework wrapped (see reset_error_in)
    raised as ronde's own exception, so that run_fn's loop recovers from it; anything else
    is raised as it was."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except _RESET_ERRORS:
            raise
        except Exception as error:
            found = reset_error_in(error, translate)
            if found is None:
                raise
            raise found from error

    return wrapper


class _DriverView:
    """This worker's view of the driver's generations, made on first use; None outside an
    elastic job (then there are never host updates)."""

    def __init__(self):
        self._view = None
        self._made = False

    def get(self):
        if not self._made:
            self._made = True
            try:
                self._view = _core.ElasticWorkerView()
            except _core.ConfigError:
                self._view = None
        return self._view


_driver = _DriverView()


def driver_view():
    return _driver.get()


class State:
    """Horovod's ``hvd.elastic.State``: the base of every elastic state. Subclasses implement
    save(), restore() and sync()."""

    def __init__(self, collectives):
        self._collectives = collectives
        self._reset_callbacks = []
        self._joined = None
        # Whether this process holds state worth giving others: false for a worker that
        # never took part in a world (it just started), true after its first sync.
        self._has_state = False
        # Which commit the saved state is, counted alike on every rank of a world (a sync
        # gives every rank the root's). Survivors can hold different ones: a rank whose
        # allreduce completed before a peer's death broke it for the others goes on to the
        # next commit alone. What a sync merges from several ranks must come from the root's.
        self._commit_id = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called with no argument after every reset, before the state is synced
        (e.g. to scale the learning rate with the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in memory (what a failure rolls back to), then raises
        HostsUpdatedInterrupt if the driver has a new world ready. Call it on every rank at
        the same point: it runs a collective."""
        self.save()
        self._commit_id += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the driver has published a world
        newer than the one this rank is in. One store round trip and one small allreduce, so
        that all ranks decide alike."""
        view = driver_view()
        if view is None:
            return
        if self._joined is None:
            self._joined = view.joined()
        newer = 1 if view.published() > self._joined else 0
        if self._collectives.allreduce_max(newer):
            raise HostsUpdatedInterrupt(False)

    def sync_root(self):
        """The lowest rank that holds state (a survivor), or 0 when nobody does yet."""
        c = self._collectives
        size = c.size()
        # max over ranks of (size - rank) for holders: the lowest holder's rank, one allreduce.
        best = c.allreduce_max(size - c.rank() if self._has_state else 0)
        return size - best if best > 0 else 0

    def _after_sync(self):
        self._has_state = True
        view = driver_view()
        self._joined = view.joined() if view is not None else None

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called after the world re-formed, before sync(); for subclasses."""


class ObjectState(State):
    """Horovod's ``hvd.elastic.ObjectState``: picklable attributes given as keyword arguments
    (``ObjectState(epoch=0, batch=0)``), committed together and synced by broadcast."""

    def __init__(self, collectives, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(collectives)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self, root=None):
        if root is None:
            root = self.sync_root()
        self._saved_state, self._commit_id = self._collectives.broadcast_object(
            (self._saved_state, self._commit_id), root)
        self._set_attrs()
        self._after_sync()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, collectives):
    """Horovod's ``run_fn``: wraps ``func(state, *args, **kwargs)`` in the reset loop."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        while True:
            try:
                state.sync()
                return func(state, *args, **kwargs)
            except _core.MismatchError:
                # The ranks disagree about a tensor: the script's bug, which every retry from
                # the last commit repeats. Horovod's loop retries it for good (a hang); ronde
                # raises it.
                raise
            except _RESET_ERRORS:
                state.restore()
            except HostsUpdatedInterrupt:
                pass  # just committed: nothing to roll back
            _reset(collectives)
            state.on_reset()

    return wrapper


def _reset(collectives):
    """Leaves the broken (or outgrown) world and joins the driver's next one."""
    for attempt in range(_INIT_ATTEMPTS):
        collectives.shutdown()
        try:
            collectives.init()
            return
        except _RESET_ERRORS:
            # A peer of the new world died while it formed: the driver forms another.
            if attempt + 1 == _INIT_ATTEMPTS:
                raise
