"""Which Keras `tf.keras` is: Keras 3 (TensorFlow 2.16+ by default) or tf_keras, Keras 2, when
TF_USE_LEGACY_KERAS=1 was set before TensorFlow was imported. Optimizers are told apart by
their own classes, so that either world's optimizer can be wrapped whatever tf.keras is."""

import sys

import tensorflow as tf


def tf_keras_is_keras2() -> bool:
    return tf.keras.__name__.split(".")[0] == "tf_keras"


def keras2_optimizer_classes():
    """tf_keras's optimizer base classes (the new one and the legacy OptimizerV2), or () when
    tf_keras was never imported (then no object can be one of its optimizers)."""
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is None:
        return ()
    return (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)


def is_keras2_optimizer(optimizer) -> bool:
    classes = keras2_optimizer_classes()
    return bool(classes) and isinstance(optimizer, classes)


def keras2_layer_class():
    tf_keras = sys.modules.get("tf_keras")
    return tf_keras.layers.Layer if tf_keras is not None else None


def keras2_session():
    """Keras 2's session (`K.get_session()` of its TF1 API), in which TF1 graph-mode Keras runs
    its graph; ronde evaluates and initializes there too, as Horovod does."""
    if tf_keras_is_keras2():
        return tf.compat.v1.keras.backend.get_session()
    from tf_keras.api._v1.keras import backend  # tf_keras used directly beside Keras 3
    return backend.get_session()
