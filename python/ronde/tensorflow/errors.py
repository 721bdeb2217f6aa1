"""ronde's errors as TensorFlow raises them: each class is both the `tf.errors.OpError` that
Horovod's TensorFlow ops raise for that failure and ronde's own class for it, so that
`except tf.errors.FailedPreconditionError` (a Horovod script) and `except hvd.MismatchError`
(a ronde script) both catch a cross-rank mismatch.

Where an error surfaces:
- eagerly, a failed compiled op is re-raised as the class below for its ronde code
  (`raise_op_error`), and the checks ronde.tensorflow makes before it submits raise these
  classes directly;
- inside a tf.function or a tf.compat.v1.Session, TensorFlow itself raises the `OpError` of
  the op's status code, which the kernels set as this table says (frontends/tensorflow,
  `statusOf`): the plain TensorFlow class there, with ronde's message.
"""

import re

import tensorflow as tf

from ronde import _core

_TAG = re.compile(r"ronde (\w+): ")


def _both(tf_class, ronde_class, doc):
    # TensorFlow's constructor (node_def, op, message): autograph re-raises an OpError that
    # crossed converted code as its own type only when it takes exactly these arguments.
    def __init__(self, node_def, op, message, *args):
        tf_class.__init__(self, node_def, op, message, *args)

    return type(ronde_class.__name__, (tf_class, ronde_class), {
        "__doc__": doc,
        "__module__": __name__,
        "__init__": __init__,
        # tf.errors.OpError keeps its message apart from the exception's args; a copy or a
        # pickle (a Ray or Spark worker sending it home) must carry it across.
        "__reduce__": lambda self: (type(self), (self.node_def, self.op, self.message)),
    })


InvalidArgumentError = _both(
    tf.errors.InvalidArgumentError, _core.InvalidArgumentError,
    "A bad argument on this rank (also a ValueError).")
ConfigError = _both(
    tf.errors.InvalidArgumentError, _core.ConfigError,
    "A bad setting (also a ValueError).")
MismatchError = _both(
    tf.errors.FailedPreconditionError, _core.MismatchError,
    "The ranks disagree on a collective (its shape, dtype, op, root, ...); Horovod raises "
    "tf.errors.FailedPreconditionError.")
TimeoutError = _both(
    tf.errors.DeadlineExceededError, _core.TimeoutError,
    "A wait outlived its deadline.")
PeerLostError = _both(
    tf.errors.AbortedError, _core.PeerLostError,
    "A peer died or closed its connection: an elastic job recovers from it.")
AbortedError = _both(
    tf.errors.AbortedError, _core.AbortedError,
    "The communicator was aborted earlier; the message names the first failure.")
AuthError = _both(
    tf.errors.PermissionDeniedError, _core.AuthError,
    "A connection did not prove that it knows the job's secret.")
IoError = _both(
    tf.errors.UnavailableError, _core.IoError,
    "The operating system refused (a socket, shared memory, a file).")
InternalError = _both(
    tf.errors.InternalError, _core.InternalError,
    "A broken invariant inside ronde: a bug.")

_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, ConfigError, MismatchError, TimeoutError, PeerLostError,
    AbortedError, AuthError, IoError, InternalError)}


def from_op_error(error):
    """The class above for a failed ronde op's `tf.errors.OpError` (its message holds
    "ronde <Code>: ", also when a tf.function or a session raised it), as an instance with
    ronde's message; None when the failure is not ronde's. The elastic loop uses it to tell a
    lost peer inside a tf.function from a bug."""
    if isinstance(error, tuple(_BY_CODE.values())):
        return error
    match = _TAG.search(error.message)  # after TensorFlow's "{{function_node ...}} " prefix
    cls = _BY_CODE.get(match.group(1)) if match else None
    if cls is None:
        return None
    message = error.message[match.end():].split(" [Op:", 1)[0]  # without TF's op suffix
    return cls(error.node_def, error.op, message)


def raise_op_error(error):
    """Re-raises a failed ronde op's `tf.errors.OpError` as the class above for its ronde code,
    and any other OpError as it is."""
    translated = from_op_error(error)
    if translated is None:
        raise error
    raise translated from None


def translate(error):
    """The TensorFlow-flavoured class of a ronde._core error raised by the numpy bridge."""
    cls = _BY_CODE.get(getattr(error, "code", None))
    if cls is None or isinstance(error, cls):
        return error
    return cls(None, None, str(error))


def invalid_argument(message):
    """InvalidArgumentError for a check ronde.tensorflow makes before it submits."""
    return InvalidArgumentError(None, None, message)
