"""Horovod's TensorFlow API on ronde: ``import ronde.tensorflow as hvd``.

Every era of Horovod TensorFlow script: TF1 graphs in `tf.compat.v1` sessions
(`hvd.DistributedOptimizer` over a `tf.compat.v1.train.Optimizer`,
`hvd.BroadcastGlobalVariablesHook`, `MonitoredTrainingSession`), TF2 eager and tf.function
(`hvd.DistributedGradientTape`), and Keras (`hvd.DistributedOptimizer` over a Keras optimizer,
through ronde.tensorflow.keras). Collectives run on ronde's runtime, the same one as
ronde.torch: named requests, negotiation, Tensor Fusion, a background thread.

Failures raise the classes of ronde.tensorflow.errors eagerly (each both Horovod's
`tf.errors` class and ronde's: a cross-rank mismatch is a `tf.errors.FailedPreconditionError`
and a `hvd.MismatchError`), and TensorFlow's `tf.errors.OpError` of the same code inside a
tf.function or a session. See docs/frontends.md.
"""

from ronde.common import numpy_ops as _nops
from ronde.common.basics import on_reset as _on_reset
from ronde.tensorflow import errors, numpy_path as _numpy_path
from ronde.tensorflow.collectives import (allreduce, grouped_allreduce,  # noqa: F401
                                          grouped_reducescatter, reducescatter)
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.functions import (allgather_object, broadcast_global_variables,  # noqa: F401
                                        broadcast_object, broadcast_object_fn,
                                        broadcast_variables)
from ronde.tensorflow.gradient_aggregation import LocalGradientAggregationHelper  # noqa: F401
from ronde.tensorflow.gradient_reduction import check_options as _check_options
from ronde.tensorflow.gradient_tape import (DistributedGradientTape,  # noqa: F401
                                            PartialDistributedGradientTape)
from ronde.tensorflow.hooks import BroadcastGlobalVariablesHook  # noqa: F401
from ronde.tensorflow.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, Max, Min, MismatchError, Product, ProcessSet,
    RondeError, Sum, add_process_set, allgather, alltoall, barrier, broadcast, broadcast_,
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built,
    gloo_enabled, grouped_allgather, init, is_homogeneous, is_initialized, join, local_rank,
    local_rank_op, local_size, local_size_op, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, process_set_included_op, rank, rank_op, remove_process_set, rocm_built,
    shutdown, size, size_op, start_timeline, stop_timeline)
from ronde.tensorflow.util import (check_extension, check_num_rank_power_of_2,  # noqa: F401
                                   gpu_available, handle_average_backwards_compatibility,
                                   refs_to_vars, split_list, vars_to_refs)

try:
    from packaging import version  # noqa: F401 (horovod.tensorflow exports it)
except ImportError:  # pragma: no cover - packaging comes with TensorFlow
    pass

_on_reset(_numpy_path.forget_handles)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's `hvd.DistributedOptimizer`: wraps an optimizer so that it applies gradients
    reduced over the ranks of `process_set`.

    A TF1 optimizer (`tf.compat.v1.train.Optimizer`) gets Horovod's graph-mode wrapper
    (compute_gradients reduces; `backward_passes_per_step` aggregates in the graph;
    op=Adasum combines each rank's update); a Keras optimizer (Keras 3, or Keras 2 from
    tf_keras) is wrapped by ronde.tensorflow.keras.DistributedOptimizer. Options as Horovod's.
    """
    op = _nops.check_op(op)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    groups = _check_options(op, gradient_predivide_factor, num_groups, groups)
    if isinstance(optimizer, _legacy_optimizer_class()):
        from ronde.tensorflow.legacy_optimizer import distributed_optimizer
        return distributed_optimizer(optimizer, name, use_locking, device_dense, device_sparse,
                                     compression, sparse_as_dense, backward_passes_per_step, op,
                                     gradient_predivide_factor, average_aggregated_gradients,
                                     groups, process_set, scale_local_gradients)
    if not hasattr(optimizer, "apply_gradients"):
        raise TypeError("DistributedOptimizer wraps a TF1 optimizer (tf.compat.v1.train."
                        "Optimizer) or a Keras optimizer, not %s" % type(optimizer).__name__)
    if op == Adasum:
        raise ValueError("op == Adasum is not supported yet with Keras")
    import ronde.tensorflow.keras as keras_frontend
    return keras_frontend.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, op=op, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)


def _legacy_optimizer_class():
    import tensorflow as tf
    return tf.compat.v1.train.Optimizer


def ronde_built():
    return True


def __getattr__(name):
    # Horovod's horovod.tensorflow exports SyncBatchNormalization. It derives from tf.keras's
    # BatchNormalization, and reading tf.keras picks Keras 3 or tf_keras for the whole process:
    # done on first use, so that importing ronde.tensorflow does not choose before the script
    # has set TF_USE_LEGACY_KERAS or disabled eager execution.
    if name == "SyncBatchNormalization":
        from ronde.tensorflow.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    if name == "elastic":  # hvd.elastic.run, hvd.elastic.TensorFlowKerasState (Keras: lazily)
        import importlib
        return importlib.import_module("ronde.tensorflow.elastic")
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
