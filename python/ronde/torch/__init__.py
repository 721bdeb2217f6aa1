"""Horovod's PyTorch API on ronde: ``import ronde.torch as hvd``.

An existing Horovod script runs by changing its import. Collectives run on ronde's runtime
(negotiated, fused, executed on a background thread); failures raise ronde._core.RondeError
subclasses, a cross-rank mismatch on every rank; a lost peer, an aborted communicator or a
timeout is also a HorovodInternalError (what elastic training recovers from).
"""

from ronde import _core
from ronde.common import basics as _basics
from ronde.torch.compression import Compression
from ronde.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                   broadcast_parameters)
from ronde.torch.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min,
                                 MismatchError, Product, RondeError, Sum, allgather,
                                 allgather_async, allreduce, allreduce_, allreduce_async,
                                 allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                 broadcast_, broadcast_async, broadcast_async_,
                                 grouped_allgather, grouped_allgather_async, grouped_allreduce,
                                 grouped_allreduce_, grouped_allreduce_async,
                                 grouped_allreduce_async_, grouped_reducescatter,
                                 grouped_reducescatter_async, join, poll,
                                 reducescatter, reducescatter_async, synchronize)
from ronde.torch.optimizer import DistributedOptimizer
from ronde.torch import mpi_ops as _mpi_ops
from ronde.torch import process_sets as _process_sets
from ronde.torch.process_sets import (ProcessSet, add_process_set, global_process_set,
                                      remove_process_set)
from ronde.torch.sparse_ops import sparse_allreduce_async
from ronde.torch.sync_batch_norm import SyncBatchNorm

size = _core.size
rank = _core.rank
local_size = _core.local_size
local_rank = _core.local_rank
cross_size = _core.cross_size
cross_rank = _core.cross_rank
is_initialized = _core.is_initialized


def _forget_previous_init():
    # A new runtime starts with no process sets and no requests: names count from 0 again on
    # every rank, and no handle or set id of the old runtime can reach the new one.
    _mpi_ops._reset_naming()
    _process_sets._forget_registrations()


def init(comm=None, process_sets=None):
    """Joins the job started by `ronde run` (or mpirun/srun). After shutdown() it starts a
    fresh runtime; otherwise it does nothing, as in Horovod, even when the runtime has stopped
    (a peer's shutdown, a stall shutdown, a failure): a rank that started the next runtime on
    its own would meet peers that have not, so every rank calls shutdown() and then init().

    comm: Horovod's list of ranks; every rank of the job in order (or None) is accepted, a
    subset raises NotImplementedError and an MPI communicator ValueError.
    process_sets: ProcessSets to register now (every rank must pass the same ones), or
    "dynamic" (Horovod's call): none now, added later. See ronde.common.basics.init.
    """
    _basics.init(comm, process_sets)


# One runtime serves every frontend of the process: whichever ends it, torch forgets too.
_basics.on_reset(_forget_previous_init)


def shutdown():
    """Leaves the job: pending requests fail, and init() may join again later."""
    _basics.shutdown()


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline of every collective to `file_path`."""
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    """Stops the timeline. As in Horovod it returns at once: the background thread writes what
    is queued and closes the file (strict JSON from then on) at its next cycle."""
    _core.stop_timeline()


# What this build has (Horovod's names): see ronde.common.build_info.
from ronde.common.build_info import (  # noqa: E402
    ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rocm_built)


def ronde_built():
    return True


# hvd.elastic, as in Horovod; imported last because it builds on everything above.
from ronde.torch import elastic  # noqa: E402
from ronde.common.elastic import HostsUpdatedInterrupt  # noqa: E402
