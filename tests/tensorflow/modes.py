"""Running the same TensorFlow code in each of the three ways Horovod scripts run it: eagerly,
inside a tf.function, and as a TF1 graph in a tf.compat.v1.Session."""

import numpy as np
import tensorflow as tf

from ronde.tensorflow import compiled_ops

MODES = ["eager", "function", "graph"]


def to_numpy(value):
    """Nested results as numpy (bfloat16 and float16 widened to float64 for comparisons)."""
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    if isinstance(value, tf.IndexedSlices):
        return tf.IndexedSlices(to_numpy(value.values), to_numpy(value.indices),
                                value.dense_shape)
    array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    if array.dtype.name in ("bfloat16", "float16"):
        return array.astype(np.float64)
    return array


def run(mode, fn, *inputs):
    """fn(*tensors) in `mode`; `inputs` are (value, dtype) pairs or tensors' values. Returns
    fn's result(s) as numpy."""
    def tensors():
        return [tf.constant(v, dtype=d) if isinstance(v, np.ndarray) or d is not None
                else tf.constant(v) for v, d in (_pair(i) for i in inputs)]
    if mode == "eager":
        return to_numpy(fn(*tensors()))
    if mode == "function":
        return to_numpy(tf.function(fn)(*tensors()))
    with tf.Graph().as_default():
        result = fn(*tensors())
        with tf.compat.v1.Session() as session:
            return to_numpy(session.run(result))


def gradient(mode, fn, x, dy):
    """The gradient of sum(fn(x) * dy) with respect to x, in `mode` (x, dy: float64 arrays)."""
    def grad(xt, dyt):
        if mode == "graph":
            return tf.gradients(tf.reduce_sum(fn(xt) * dyt), xt)[0]
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = fn(xt)
        return tape.gradient(y, xt, output_gradients=dyt)
    return run(mode, grad, (x, tf.float64), (dy, tf.float64))


def _pair(item):
    if isinstance(item, tuple) and len(item) == 2 and (item[1] is None or
                                                      isinstance(item[1], tf.dtypes.DType)):
        return item
    return item, None


def failure_class(mode, tf_class):
    """The tf.errors class a ronde failure of `tf_class` raises in `mode`: inside a function or
    a session the numpy bridge's py_funcs fail with UnknownError, but for ValueErrors (an
    invalid argument): TensorFlow maps no other exception of a py_func to its code."""
    if (mode != "eager" and compiled_ops.library() is None and
            tf_class is not tf.errors.InvalidArgumentError):
        return tf.errors.UnknownError
    return tf_class
