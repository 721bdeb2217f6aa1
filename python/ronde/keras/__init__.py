"""Horovod's Keras API for Keras 3 on any backend: ``import ronde.keras as hvd``.

DistributedOptimizer reduces gradients on the tensorflow, torch and jax backends (through
ronde.tensorflow, ronde.torch, or a jax io_callback into ronde's numpy ops: the same runtime); the callbacks, broadcast_object and
load_model are backend-neutral (numpy through ronde's runtime).
"""

import keras

from ronde.common.basics import (cross_rank, cross_size, init, is_homogeneous, is_initialized,
                                 local_rank, local_size, rank, shutdown, size, start_timeline,
                                 stop_timeline)
from ronde.common.numpy_ops import Adasum, Average, Max, Min, Product, Sum
from ronde.common.objects import allgather_object, broadcast_object
from ronde.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                       remove_process_set)
from ronde.keras import callbacks
from ronde.keras.callbacks import broadcast_keras_variables
from ronde.keras.compression import Compression
from ronde.keras.optimizer import DistributedOptimizer


def broadcast_global_variables(model, root_rank=0, process_set=global_process_set):
    """Assigns root_rank's values to the model's (and its optimizer's) variables."""
    broadcast_keras_variables(model.variables, root_rank, "keras.global", process_set)
    if getattr(model, "optimizer", None) is not None:
        broadcast_keras_variables(model.optimizer.variables, root_rank, "keras.global_opt",
                                  process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, **optimizer_kwargs):
    """Horovod's `hvd.load_model`: loads a Keras model saved by model.save() and wraps its
    optimizer (state included) in DistributedOptimizer. `custom_optimizers` (optimizer
    classes) are made known to the loader like `custom_objects`."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        DistributedOptimizer(model.optimizer, compression=compression, **optimizer_kwargs)
    return model
