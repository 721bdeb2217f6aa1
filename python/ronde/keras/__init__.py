"""Horovod's Keras API for Keras 3 on any backend: ``import ronde.keras as hvd``.

DistributedOptimizer reduces gradients on the tensorflow, torch and jax backends (through
ronde.tensorflow, ronde.torch, or a jax io_callback into ronde's numpy ops: the same runtime);
the callbacks, the keras-level collectives, broadcast_object and load_model are
backend-neutral (numpy through ronde's runtime). Keras 2 (tf_keras) is ronde.tensorflow.keras's.
"""

import keras

from ronde.common.basics import (cross_rank, cross_size, init, is_homogeneous, is_initialized,
                                 local_rank, local_size, rank, shutdown, size, start_timeline,
                                 stop_timeline)
from ronde.common.build_info import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,
                                     mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                                     rocm_built)
from ronde.common.numpy_ops import Adasum, Average, Max, Min, Product, Sum
from ronde.common.objects import allgather_object, broadcast_object
from ronde.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                       remove_process_set)
from ronde.keras import callbacks, elastic  # noqa: F401 (hvd.elastic)
from ronde.keras.callback_impl import broadcast_values as _broadcast_values
from ronde.keras.compression import Compression
from ronde.keras.keras3_access import KERAS3 as _KERAS3
from ronde.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from ronde.keras.values import allgather, allreduce, broadcast, reducescatter


def broadcast_global_variables(root_rank, *, model=None, process_set=global_process_set):
    """Horovod's `horovod.keras.broadcast_global_variables(root_rank)`. Keras 3 keeps no
    collection of global variables and runs eagerly, where Horovod raises RuntimeError; so
    does this, unless keyword-only `model` names whose variables (and its optimizer's) take
    root_rank's values."""
    if model is None:
        raise RuntimeError("broadcast_global_variables() does not support eager execution "
                           "(Keras 3 has no global variables). Please use "
                           "`broadcast_global_variables(root_rank, model=model)` or "
                           "`callbacks.BroadcastGlobalVariablesCallback` instead.")
    _broadcast_values(_KERAS3, model.variables, root_rank, "keras.global", process_set)
    if getattr(model, "optimizer", None) is not None:
        _broadcast_values(_KERAS3, model.optimizer.variables, root_rank, "keras.global_opt",
                          process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Horovod's `hvd.load_model`: loads a Keras model saved by model.save() and wraps its
    optimizer (state included) in DistributedOptimizer with `compression`.
    `custom_optimizers` (optimizer classes) are made known to the loader like
    `custom_objects`. Keras 3 has no legacy optimizers: legacy_opts=True is a ValueError
    (load a tf_keras model with ronde.tensorflow.keras under TF_USE_LEGACY_KERAS=1)."""
    if legacy_opts:
        raise ValueError("legacy_opts=True: Keras 3 has no legacy optimizers; load Keras 2 "
                         "models with ronde.tensorflow.keras.load_model under "
                         "TF_USE_LEGACY_KERAS=1")
    objects = {cls.__name__: cls for cls in custom_optimizers or []}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        DistributedOptimizer(model.optimizer, compression=compression)
    return model
