"""Horovod's TensorFlow 2 API on ronde: ``import ronde.tensorflow as hvd``.

Collectives run on ronde's runtime (the same one as ronde.torch: named requests, negotiation,
Tensor Fusion, a background thread), eagerly and inside tf.function. Failures raise
ronde._core.RondeError subclasses in eager mode, and a tf.errors.OpError carrying the
runtime's message inside a graph. See docs/frontends.md for the mechanism.
"""

from ronde import _core
from ronde.common import numpy_ops as _nops
from ronde.common import process_sets as _process_sets
from ronde.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                       remove_process_set)
from ronde.tensorflow import mpi_ops as _mpi_ops
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.functions import (allgather_object, broadcast_object,
                                        broadcast_variables)
from ronde.tensorflow.gradient_tape import DistributedGradientTape
from ronde.tensorflow.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min,
                                      MismatchError, Product, RondeError, Sum, allgather,
                                      allreduce, alltoall, barrier, broadcast, broadcast_,
                                      grouped_allgather, grouped_allreduce,
                                      grouped_reducescatter, join, reducescatter)

size = _core.size
rank = _core.rank
local_size = _core.local_size
local_rank = _core.local_rank
cross_size = _core.cross_size
cross_rank = _core.cross_rank
is_initialized = _core.is_initialized


def init(comm=None, process_sets=None):
    """Horovod's `hvd.init`: joins the job started by `ronde run` (or mpirun/srun). Calling it
    again while initialized is harmless; after shutdown() it starts a fresh runtime.
    `comm` (an MPI communicator) is refused; `process_sets` are registered now."""
    if comm is not None and comm != []:
        raise ValueError("ronde.tensorflow.init: an MPI communicator is not supported")
    if not _core.is_initialized():
        _core.shutdown()  # a runtime that stopped by itself is replaced
        _mpi_ops._reset()
        _process_sets.forget_registrations()
    _core.init()
    for process_set in process_sets or []:
        if process_set.process_set_id is None:
            add_process_set(process_set)


def shutdown():
    """Horovod's `hvd.shutdown`: leaves the job; init() may join again later."""
    _core.shutdown()
    _mpi_ops._reset()
    _process_sets.forget_registrations()


def is_homogeneous():
    return size() == local_size() * cross_size()


def start_timeline(file_path, mark_cycles=False):
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _core.stop_timeline()


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set):
    """Horovod's `hvd.DistributedOptimizer` for TensorFlow 2: wraps a Keras optimizer (in TF
    2.16+ tf.keras is Keras 3) so that apply_gradients() applies gradients reduced over the
    ranks. TF1's tf.compat.v1.train.Optimizer is not supported (a TypeError says so)."""
    import keras
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("ronde.tensorflow.DistributedOptimizer wraps a Keras optimizer, not %s"
                        % type(optimizer).__name__)
    from ronde.keras.optimizer import DistributedOptimizer as _keras_optimizer
    return _keras_optimizer(optimizer, name=name, compression=compression,
                            sparse_as_dense=sparse_as_dense,
                            backward_passes_per_step=backward_passes_per_step, op=op,
                            gradient_predivide_factor=gradient_predivide_factor,
                            average_aggregated_gradients=average_aggregated_gradients,
                            process_set=process_set)


def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def ronde_built():
    return True
