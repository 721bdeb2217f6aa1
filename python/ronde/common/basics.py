"""init/shutdown and the job's facts for the frontends without torch (Horovod's basics)."""

from ronde import _core
from ronde.common import numpy_ops
from ronde.common import process_sets as _process_sets

_reset_hooks = []


def on_reset(hook):
    """Registers a function called whenever a runtime ends or a new one starts (so a frontend
    forgets its names and handles on every rank alike)."""
    if hook not in _reset_hooks:
        _reset_hooks.append(hook)


def _reset():
    numpy_ops.reset_naming()
    _process_sets.forget_registrations()
    for hook in _reset_hooks:
        hook()


def init(comm=None, process_sets=None):
    """Horovod's `hvd.init`: joins the job started by `ronde run` (or mpirun/srun). After
    shutdown() it starts a fresh runtime; otherwise it does nothing, even when the runtime has
    stopped (see ronde.torch.init: every rank calls shutdown() and then init()).
    `comm` (an MPI communicator) is refused; `process_sets` are registered now (every rank
    must pass the same ones)."""
    if comm is not None and comm != []:
        raise ValueError("ronde: an MPI communicator is not supported in init()")
    _core.init()
    for process_set in process_sets or []:
        if process_set.process_set_id is None:
            _process_sets.add_process_set(process_set)


def shutdown():
    """Horovod's `hvd.shutdown`: leaves the job; init() may join again later."""
    _core.shutdown()
    _reset()


size = _core.size
rank = _core.rank
local_size = _core.local_size
local_rank = _core.local_rank
cross_size = _core.cross_size
cross_rank = _core.cross_rank
is_initialized = _core.is_initialized


def is_homogeneous():
    return size() == local_size() * cross_size()


def start_timeline(file_path, mark_cycles=False):
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _core.stop_timeline()
