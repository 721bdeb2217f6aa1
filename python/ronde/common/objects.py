"""broadcast_object and allgather_object for every frontend: pickled bytes through the numpy
bridge, so no framework is needed."""

import pickle

import numpy as np

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set


def _tag(name, process_set):
    # Unnamed objects are numbered, not named by type: a non-root rank often passes None.
    if name:
        return "object." + name
    return "object.noname.set%d.%d" % (process_set.process_set_id,
                                       nops.next_number("object", process_set))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (any picklable object) on every rank of the set."""
    nops.check_initialized("broadcast_object")
    tag = _tag(name, process_set)
    if _core.rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload, length = None, np.zeros(1, dtype=np.int64)
    length = nops.broadcast(length, root_rank, tag + ".length", process_set).wait()
    if payload is None:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    payload = nops.broadcast(payload, root_rank, tag + ".data", process_set).wait()
    return obj if _core.rank() == root_rank else pickle.loads(payload.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every member's `obj` (any picklable object), in rank order."""
    nops.check_initialized("allgather_object")
    tag = _tag(name, process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = nops.allgather(np.array([payload.size], dtype=np.int64), tag + ".length",
                             process_set).wait()
    gathered = nops.allgather(payload, tag + ".data", process_set).wait().tobytes()
    objects, offset = [], 0
    for length in lengths.tolist():
        objects.append(pickle.loads(gathered[offset:offset + length]))
        offset += length
    return objects
