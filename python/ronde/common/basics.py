"""init/shutdown and the job's facts for the frontends without torch (Horovod's basics)."""

import numbers

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


def _process_sets_to_register(process_sets):
    """The ProcessSets that init() registers: Horovod takes a list, or "dynamic" (none now,
    add_process_set later; ronde always allows that, so "dynamic" asks for nothing more)."""
    if process_sets is None:
        return []
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("init(process_sets=%r): expected a list of ProcessSets or "
                             "\"dynamic\"" % (process_sets,))
        return []
    return list(process_sets)


def _comm_ranks(comm):
    """Horovod's `comm` as a list of ranks, or None for the whole job. Horovod also takes an
    mpi4py communicator; ronde forms its job from `ronde run`, not from MPI, and refuses it."""
    if comm is None:
        return None
    if isinstance(comm, (str, bytes)) or not hasattr(comm, "__iter__"):
        raise ValueError("init(comm=%r): ronde takes a list of ranks; an MPI communicator is "
                         "not supported (ronde forms the job from `ronde run`)" % (comm,))
    ranks = list(comm)
    if not ranks:
        return None
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 0:
            raise ValueError("init(comm=%r): ranks must be non-negative integers, not %r"
                             % (ranks, r))
    if len(set(ranks)) != len(ranks):
        raise ValueError("init(comm=%r): a rank is listed twice" % (ranks,))
    return [int(r) for r in ranks]


def init(comm=None, process_sets=None):
    """Horovod's `hvd.init`: joins the job started by `ronde run` (or mpirun/srun). After
    shutdown() it starts a fresh runtime; otherwise it does nothing, even when the runtime has
    stopped (see ronde.torch.init: every rank calls shutdown() and then init()).

    comm: as in Horovod, a list of ranks the job is made of; ronde takes every rank of the
    job in order (the same as None) and refuses a subset with NotImplementedError (every rank
    alike: use a ProcessSet of those ranks). An MPI communicator is refused (ValueError).
    process_sets: ProcessSets to register now (every rank must pass the same ones), or
    "dynamic" as in Horovod: none now; add_process_set/remove_process_set work after init
    either way."""
    ranks = _comm_ranks(comm)
    to_register = _process_sets_to_register(process_sets)
    _core.init()
    if ranks is not None and ranks != list(range(_core.size())):
        size = _core.size()
        shutdown()  # every rank that was given these ranks refuses them alike
        raise NotImplementedError(
            "init(comm=%r): ronde runs every rank of the job as one world (ranks 0..%d); a job "
            "made of some of them is not supported. Run collectives on those ranks with a "
            "ProcessSet(%r) instead" % (ranks, size - 1, ranks))
    for process_set in to_register:
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
