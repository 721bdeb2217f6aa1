"""Process sets (Horovod's ProcessSet API), one registry shared by every frontend
(ronde.torch.process_sets re-exports it)."""

from ronde import _core


class ProcessSet:
    """A set of ranks. `process_set_id` is assigned when it is registered (add_process_set or
    init(process_sets=...)); the global set has id 0 and holds every rank."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks) if ranks is not None else None
        self.process_set_id = None

    def size(self) -> int:
        if self.ranks is None:
            return _core.size()
        return len(self.ranks)

    def rank(self) -> int:
        """This process's index in the set, or -1 when it is not a member."""
        if self.ranks is None:
            return _core.rank()
        me = _core.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self) -> bool:
        return self.rank() >= 0

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet(None)
global_process_set.process_set_id = 0

# The sets registered since init: shutdown forgets their ids (the next runtime numbers its
# own), so that init(process_sets=...) can register the same objects again.
_registered = []


def forget_registrations():
    for process_set in _registered:
        process_set.process_set_id = None
    del _registered[:]


def add_process_set(process_set):
    """Registers a set of ranks (a ProcessSet or a list of ranks); every rank must call it."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%r is registered already" % (process_set,))
    # Horovod's rule: one set per list of ranks, the global set's included. Every rank holds the
    # same registry, so every rank refuses alike (before anything reaches the runtime).
    if process_set.ranks is not None:
        taken = [list(range(_core.size()))] + [p.ranks for p in _registered]
        if process_set.ranks in taken:
            raise ValueError("Attempted to add a duplicate process set: ranks %s are a "
                             "registered set already" % (process_set.ranks,))
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    _registered.append(process_set)
    return process_set


def process_set_by_id(process_set_id):
    """The registered ProcessSet of an id (0: the global set); ValueError if none has it."""
    if process_set_id == 0:
        return global_process_set
    for process_set in _registered:
        if process_set.process_set_id == process_set_id:
            return process_set
    raise ValueError("no process set has id %r (never added, or removed)" % (process_set_id,))


def remove_process_set(process_set) -> bool:
    """Unregisters a process set; every rank must call it. Returns True when it was removed."""
    if process_set.process_set_id in (None, 0):
        return False
    _core.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    if process_set in _registered:
        _registered.remove(process_set)
    return True
