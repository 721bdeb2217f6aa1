"""Horovod's `horovod.tensorflow.keras` on ronde: ``import ronde.tensorflow.keras as hvd``.

It works on whatever tf.keras is: Keras 3 (TensorFlow 2.16+), or tf_keras (Keras 2) when
TF_USE_LEGACY_KERAS=1, eagerly or in TF1 graph mode. DistributedOptimizer takes an optimizer of
either world. Beyond Horovod's names: PartialDistributedOptimizer (horovod.keras's),
ronde.tensorflow's tensor collectives under their own names, and the object collectives."""

from ronde.common.basics import (cross_rank, cross_size, init, is_homogeneous,  # noqa: F401
                                 is_initialized, local_rank, local_size, rank, shutdown, size,
                                 start_timeline, stop_timeline)
from ronde.common.build_info import (ccl_built, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                     gloo_enabled, mpi_built, mpi_enabled,
                                     mpi_threads_supported, nccl_built, rocm_built)
from ronde.common.objects import allgather_object, broadcast_object  # noqa: F401
from ronde.common.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                       global_process_set, remove_process_set)
from ronde.tensorflow import (Adasum, Average, Max, Min, Product, Sum, alltoall,  # noqa: F401
                              barrier, broadcast_variables, grouped_allreduce, join)
from ronde.tensorflow.compression import Compression  # noqa: F401
from ronde.tensorflow.keras import callbacks, elastic  # noqa: F401
from ronde.tensorflow.keras.loading import load_model  # noqa: F401
from ronde.tensorflow.keras.optimizers import (DistributedOptimizer,  # noqa: F401
                                               PartialDistributedOptimizer)
from ronde.tensorflow.keras.values import (allgather, allreduce, broadcast,  # noqa: F401
                                           broadcast_global_variables, reducescatter)
