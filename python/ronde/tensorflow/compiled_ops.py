"""ronde.tensorflow's compiled kernels (frontends/tensorflow): asynchronous TensorFlow ops that
submit to the runtime from C++, with no Python, no GIL and no numpy copy per op.

They exist where ronde was built against a TensorFlow (`pip install --no-build-isolation` in an
environment that has it, or RONDE_TENSORFLOW_PYTHON naming one), and are loaded only under that
same TensorFlow version: TF's C++ ABI changes between releases. RONDE_TENSORFLOW_OPS chooses:
`auto` (these where available, else the tf.numpy_function path), `compiled` (these, or an
error at import saying why not), `python` (always the tf.numpy_function path).

A failed op's message holds "ronde <Code>: " before the runtime's; `run` raises such an
OpError eagerly as the class of ronde.tensorflow.errors for that code.
"""

import os

import tensorflow as tf

from ronde import _core
from ronde.tensorflow import errors

_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = os.path.join(_DIRECTORY, "_ronde_tf_ops.so")
_BUILT_FOR = os.path.join(_DIRECTORY, "tensorflow_build.txt")

_loaded = None  # (module of op wrappers or None, why not) once decided


def _load():
    mode = _core.tensorflow_ops()
    if mode == "python":
        return None, "RONDE_TENSORFLOW_OPS=python"
    if not os.path.exists(_LIBRARY):
        why = ("this ronde was built without TensorFlow (pip install --no-build-isolation in an "
               "environment with TensorFlow builds the kernels)")
    else:
        with open(_BUILT_FOR) as f:
            built_for = f.read().strip()
        if built_for != tf.__version__:
            why = ("its kernels were built for TensorFlow %s, not the running %s"
                   % (built_for, tf.__version__))
        else:
            return tf.load_op_library(_LIBRARY), None
    if mode == "compiled":
        raise ImportError("RONDE_TENSORFLOW_OPS=compiled, but " + why)
    return None, why


def library():
    """The loaded op library (its ops as functions: ronde_allreduce, ...), or None."""
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded[0]


def why_not():
    """Why the compiled kernels are not in use (None when they are)."""
    library()
    return _loaded[1]


def run(op, *inputs, ordered=False, **attrs):
    """Creates (in a graph) or runs (eagerly) the compiled op function `op`.

    Eagerly, a ronde failure is raised as ronde.tensorflow.errors' class for its code (both
    TensorFlow's class and ronde's). Inside a tf.function the new op is marked to run
    independently of the function's other stateful ops: it must run, but in no set order, as
    Horovod's (unmarked) ops run, so that collectives can be fused and ranks that create
    independent collectives in different orders do not wait for each other. `ordered` ops
    (barrier, join: they have no inputs to order them, and their meaning is their place in the
    program) keep the function's program order instead.
    """
    if tf.executing_eagerly():
        try:
            return op(*inputs, **attrs)
        except tf.errors.OpError as error:
            errors.raise_op_error(error)
    result = op(*inputs, **attrs)
    if not ordered:
        mark_independent(result)
    return result


def mark_independent(result):
    """Marks the op behind `result` (an Operation, a tensor or a list of tensors) as one that
    a tf.function must run but need not order (see run)."""
    manager = getattr(tf.compat.v1.get_default_graph(), "experimental_acd_manager", None)
    if manager is None:  # a TF1 graph, or not under automatic control dependencies
        return
    if isinstance(result, (list, tuple)):
        if not result:
            return
        result = result[0]
    operation = result if isinstance(result, tf.Operation) else result.op
    manager.run_independently(operation)


def scale_text(value):
    """A scale factor as the ops' string attribute: repr keeps every bit of the double."""
    return repr(float(value))
