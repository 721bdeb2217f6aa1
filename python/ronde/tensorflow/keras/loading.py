"""Horovod's `horovod.tensorflow.keras.load_model` on whatever tf.keras is."""

import tensorflow as tf

from ronde.tensorflow.compression import Compression
from ronde.tensorflow.keras.optimizers import DistributedOptimizer
from ronde.tensorflow.keras.world import tf_keras_is_keras2


def _builtin_optimizers(keras, legacy):
    """Horovod's map of Keras 2's optimizer classes by lowercase name (the key Keras 2 looks
    built-in optimizers up by), legacy or new, without classes made by DistributedOptimizer."""
    base = keras.optimizers.legacy.Optimizer if legacy else keras.optimizers.Optimizer
    return {cls.__name__.lower(): cls for cls in base.__subclasses__()
            if not getattr(cls, "_ronde_distributed", False)}


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Horovod's `hvd.load_model`: loads a model saved by model.save() and wraps its optimizer
    (state included) in DistributedOptimizer with `compression`. On tf_keras, as in Horovod,
    the built-in optimizers are looked up among the legacy classes with legacy_opts=True and
    among the new ones otherwise; `custom_optimizers` (classes) are known by their names and
    `custom_objects` come last. Differences: the loaded optimizer is wrapped in place after
    loading (Horovod loads it as a wrapped class). On Keras 3 see ronde.keras.load_model."""
    if not tf_keras_is_keras2():
        import ronde.keras
        return ronde.keras.load_model(filepath, custom_optimizers, custom_objects, compression,
                                      legacy_opts)
    keras = tf.keras
    objects = _builtin_optimizers(keras, legacy_opts)
    objects.update({cls.__name__: cls for cls in custom_optimizers or []})
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    if getattr(model, "optimizer", None) is not None:
        DistributedOptimizer(model.optimizer, compression=compression)
    return model
