"""Horovod's TensorFlow 2 API on ronde: ``import ronde.tensorflow as hvd``.

Collectives run on ronde's runtime (the same one as ronde.torch: named requests, negotiation,
Tensor Fusion, a background thread), eagerly and inside tf.function. Failures raise
ronde._core.RondeError subclasses in eager mode, and a tf.errors.OpError carrying the
runtime's message inside a graph. See docs/frontends.md for the mechanism.
"""

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

from ronde.common.basics import (cross_rank, cross_size, init, is_homogeneous,  # noqa: E402
                                 is_initialized, local_rank, local_size, rank, shutdown, size,
                                 start_timeline, stop_timeline)
from ronde.common.basics import on_reset as _on_reset  # noqa: E402

_on_reset(_mpi_ops._forget_handles)


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


# What this build has (Horovod's names): see ronde.common.build_info.
from ronde.common.build_info import (  # noqa: E402
    ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rocm_built)


def ronde_built():
    return True
