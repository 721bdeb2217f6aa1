"""Collectives on numpy arrays through ronde._core: the bridge of every frontend that can see
its tensors as host arrays (TensorFlow through tf.numpy_function, Keras callbacks, JAX).

A call submits a named request and returns a `Pending` at once; `Pending.wait()` returns the
result. The request holds the arrays it reads and writes until it completes, so a caller may
drop them. Names: unnamed requests are numbered per kind and process set from 0 after every
init, so ranks that submit in the same order agree on them (as in ronde.torch).
"""

import collections
import itertools

import numpy as np

from ronde import _core
from ronde.common.process_sets import global_process_set
from ronde.common.reduce_ops import (CORE_OPS as _CORE_OPS, DTYPE_CODES, Adasum, Average,  # noqa: F401
                                     Max, Min, Product, Sum)

# ronde::RequestKind
ALLREDUCE = _core.RequestKind.ALLREDUCE
ALLGATHER = _core.RequestKind.ALLGATHER
BROADCAST = _core.RequestKind.BROADCAST
ALLTOALL = _core.RequestKind.ALLTOALL
REDUCESCATTER = _core.RequestKind.REDUCESCATTER
BARRIER = _core.RequestKind.BARRIER
JOIN = _core.RequestKind.JOIN

# ronde::DataType by numpy dtype name (bfloat16 is ml_dtypes' type, as TensorFlow hands it).
_DTYPES = DTYPE_CODES

_counters = collections.defaultdict(itertools.count)
# Joins completed since init: the numbering's epoch (ronde.torch.submission._epoch says why).
_epoch = {"joins": 0}


def reset_naming():
    """Unnamed requests count from 0 again (called at init, on every rank alike)."""
    _counters.clear()
    _epoch["joins"] = 0


def joined_all():
    """A join completed on every rank: unnamed requests number in step again, under the next
    epoch (``<kind>.noname.j<epoch>.<n>``), whatever calls a joined rank skipped."""
    _counters.clear()
    _epoch["joins"] += 1


def next_number(kind, process_set=global_process_set):
    return next(_counters[(kind, process_set.process_set_id)])


def request_name(kind, name, process_set=global_process_set):
    """The runtime's name of a request: `<kind>.<name>`, or a numbered one when unnamed."""
    if name is not None:
        return "%s.%s" % (kind, name)
    set_id = process_set.process_set_id
    number = next_number(kind, process_set)
    if _epoch["joins"]:
        number = "j%d.%d" % (_epoch["joins"], number)
    if set_id == 0:
        return "%s.noname.%s" % (kind, number)
    return "%s.noname.set%d.%s" % (kind, set_id, number)


def check_initialized(what):
    if not _core.is_initialized():
        raise ValueError("%s: ronde is not initialized, or its runtime has stopped; call "
                         "hvd.init() first, or hvd.shutdown() and hvd.init() on every rank"
                         % what)


def check_op(op, average=None):
    """Horovod's op/average rule; returns the op to use."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        op = Average if average else Sum
    if op is None:
        op = Average
    if op not in _CORE_OPS:
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def dtype_code(dtype):
    """ronde's code for a numpy dtype; an unsupported one is a ValueError naming it."""
    code = _DTYPES.get(np.dtype(dtype).name)
    if code is None:
        raise ValueError("ronde does not support tensors of dtype %s" % np.dtype(dtype).name)
    return code


def _ref(array):
    """The runtime's view of a C-contiguous host array; the request holds `array` alive."""
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return _core.TensorRef(array, array.__array_interface__["data"][0], dtype_code(array.dtype),
                           list(array.shape), -1)


def _allocator(dtype):
    def allocate(shape):
        return _ref(np.empty(shape, dtype=dtype))
    return allocate


def _spec(kind, name, source, output=None, allocate=None, op=Sum, prescale=1.0, postscale=1.0,
          root=0, splits=(), process_set=global_process_set):
    """The typed request (ronde._core.Request) the runtime takes."""
    return _core.Request(kind, name, _ref(source) if source is not None else None,
                         _ref(output) if output is not None else None, _CORE_OPS[op],
                         float(prescale), float(postscale), process_set.process_set_id,
                         int(root), [int(s) for s in splits], allocate)


class Pending:
    """One submitted request (or a group); `wait()` returns its result once."""

    def __init__(self, cores, finish):
        self._cores = cores
        self._finish = finish

    def poll(self) -> bool:
        return all(c.poll() for c in self._cores)

    def wait(self):
        for c in self._cores:
            c.wait()
        return self._finish(self._cores)


def _host(array):
    # TensorFlow may hand read-only or strided views; the runtime reads C-contiguous memory.
    return np.ascontiguousarray(array)


def allreduce(array, name, op=Average, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Starts an allreduce of `array`; wait() returns a new array."""
    source = _host(array)
    output = np.empty_like(source)
    core = _core.enqueue(_spec(ALLREDUCE, name, source, output, op=op, prescale=prescale_factor,
                               postscale=postscale_factor, process_set=process_set))
    return Pending([core], lambda cores: output)


def grouped_allreduce(arrays, names, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Starts one negotiated, fused group of allreduces; wait() returns the list of results."""
    sources = [_host(a) for a in arrays]
    outputs = [np.empty_like(s) for s in sources]
    specs = [_spec(ALLREDUCE, n, s, o, op=op, prescale=prescale_factor,
                   postscale=postscale_factor, process_set=process_set)
             for s, o, n in zip(sources, outputs, names)]
    cores = _core.enqueue_group(specs)
    return Pending(cores, lambda cores: outputs)


def allgather(array, name, process_set=global_process_set):
    """Starts an allgather along the first dimension (it may differ by rank)."""
    source = _host(array)
    if source.ndim == 0:
        source = source.reshape(1)
    core = _core.enqueue(_spec(ALLGATHER, name, source, allocate=_allocator(source.dtype),
                               process_set=process_set))
    return Pending([core], lambda cores: cores[0].output())


def grouped_allgather(arrays, names, process_set=global_process_set):
    sources = [_host(a).reshape(-1) if np.ndim(a) == 0 else _host(a) for a in arrays]
    specs = [_spec(ALLGATHER, n, s, allocate=_allocator(s.dtype), process_set=process_set)
             for s, n in zip(sources, names)]
    cores = _core.enqueue_group(specs)
    return Pending(cores, lambda cores: [c.output() for c in cores])


def root_index(root_rank, process_set):
    """The runtime's root (an index into the set) for Horovod's root_rank (a global rank)."""
    root_rank = int(root_rank)
    if process_set.ranks is None:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError("broadcast: root_rank %d is not in %r; root_rank is a global rank"
                         % (root_rank, process_set))
    return process_set.ranks.index(root_rank)


def broadcast(array, root_rank, name, process_set=global_process_set):
    """Starts a broadcast of root_rank's `array`; wait() returns a new array."""
    root = root_index(root_rank, process_set)
    output = np.array(array, copy=True, order="C")
    core = _core.enqueue(_spec(BROADCAST, name, output, output, root=root,
                               process_set=process_set))
    return Pending([core], lambda cores: output)


def split_list(splits):
    """`splits` as a list of ints; a non-integer dtype is a ValueError."""
    values = np.asarray(splits)
    if values.size and values.dtype.kind not in "iu":
        raise ValueError("alltoall: splits must have an integer dtype, not %s" % values.dtype)
    return [int(s) for s in values.reshape(-1)]


def alltoall(array, splits, name, process_set=global_process_set):
    """Starts an alltoall; wait() returns (output, received_splits as int32)."""
    source = _host(array)
    if splits is None:
        ranks = process_set.size()
        rows = source.shape[0] if source.ndim > 0 else 0
        if rows % ranks != 0:
            raise ValueError("alltoall without splits needs the first dimension (%d) to be "
                             "divisible by the number of ranks (%d)" % (rows, ranks))
        split_values = [rows // ranks] * ranks
    else:
        split_values = split_list(splits)
    core = _core.enqueue(_spec(ALLTOALL, name, source, allocate=_allocator(source.dtype),
                               splits=split_values, process_set=process_set))

    def finish(cores):
        return cores[0].output(), np.asarray(cores[0].result(), dtype=np.int32)
    return Pending([core], finish)


def reducescatter(array, name, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Starts a reducescatter: this rank gets its share of the first dimension."""
    source = _host(array)
    core = _core.enqueue(_spec(REDUCESCATTER, name, source, allocate=_allocator(source.dtype),
                               op=op, prescale=prescale_factor, postscale=postscale_factor,
                               process_set=process_set))
    return Pending([core], lambda cores: cores[0].output())


def grouped_reducescatter(arrays, names, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
    sources = [_host(a) for a in arrays]
    specs = [_spec(REDUCESCATTER, n, s, allocate=_allocator(s.dtype), op=op,
                   prescale=prescale_factor, postscale=postscale_factor,
                   process_set=process_set) for s, n in zip(sources, names)]
    cores = _core.enqueue_group(specs)
    return Pending(cores, lambda cores: [c.output() for c in cores])


def join():
    """Marks this rank done; returns the rank that joined last."""
    core = _core.enqueue(_spec(JOIN, request_name("join", None), None))
    counted = []

    def finish(cores):
        if not counted:  # once, however often wait() is called
            counted.append(True)
            joined_all()  # every rank is here together
        return int(cores[0].result()[0]) if cores[0].result() else -1
    return Pending([core], finish)


def barrier(process_set=global_process_set):
    core = _core.enqueue(_spec(BARRIER, request_name("barrier", None, process_set), None,
                               process_set=process_set))
    return Pending([core], lambda cores: None)
