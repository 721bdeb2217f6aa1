"""ronde.tensorflow's compiled kernels (frontends/tensorflow): asynchronous TensorFlow ops that
submit to the runtime from C++, with no Python, no GIL and no numpy copy per op.

They exist where ronde was built against a TensorFlow (`pip install --no-build-isolation` in an
environment that has it, or RONDE_TENSORFLOW_PYTHON naming one), and are loaded only under that
same TensorFlow version: TF's C++ ABI changes between releases. RONDE_TENSORFLOW_OPS chooses:
`auto` (these where available, else the tf.numpy_function path), `compiled` (these, or an
error at import saying why not), `python` (always the tf.numpy_function path).

A failed op's message holds "ronde <Code>: " before the runtime's; `raise_as_ronde_error`
turns such an OpError into ronde's own exception class, as the eager numpy path raises it.
"""

import os
import re

import tensorflow as tf

from ronde import _core

_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = os.path.join(_DIRECTORY, "_ronde_tf_ops.so")
_BUILT_FOR = os.path.join(_DIRECTORY, "tensorflow_build.txt")
_TAG = re.compile(r"ronde (\w+): ")

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


def raise_as_ronde_error(error):
    """Re-raises a failed ronde op's tf.errors.OpError as ronde's exception class for its
    code (MismatchError, TimeoutError, ...); any other OpError as it is."""
    match = _TAG.search(error.message)  # after TensorFlow's "{{function_node ...}} " prefix
    cls = getattr(_core, match.group(1) + "Error", None) if match else None
    if cls is None or not isinstance(cls, type) or not issubclass(cls, _core.RondeError):
        raise error
    message = error.message[match.end():]
    raise cls(message.split(" [Op:", 1)[0]) from None  # without TensorFlow's op suffix


def scale_text(value):
    """A scale factor as the ops' string attribute: repr keeps every bit of the double."""
    return repr(float(value))
