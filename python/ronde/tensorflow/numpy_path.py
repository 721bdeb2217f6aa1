"""ronde.tensorflow's collectives without compiled kernels (a ronde built without TensorFlow,
or under another TensorFlow version, or RONDE_TENSORFLOW_OPS=python): each collective is a
stateful `tf.numpy_function` (TensorFlow's public, versioned Python API) whose body hands the
runtime the tensor's host buffer as a named request (ronde.common.numpy_ops) and waits for it
with the GIL released; eagerly the same body runs directly on `tensor.numpy()`.

A tf.function runs these stateful ops one after the other in program order, so
`allreduce_start`/`finish` split an allreduce into an op that submits and returns a handle at
once and an op that waits: DistributedGradientTape creates every submitting op before any
waiting one, and the runtime fuses what the backward pass submitted.

Gradients are Horovod's formulas (ronde.tensorflow.gradients) in tf.custom_gradient wrappers.
"""

import itertools

import numpy as np
import tensorflow as tf

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.tensorflow import errors

# handle number -> Pending, for the split (submit, wait) form of an allreduce.
_pending = {}
_next_handle = itertools.count(1)


def forget_handles():
    _pending.clear()


def _translating(body):
    """`body` raising ronde's errors as ronde.tensorflow.errors' classes: TensorFlow gives a
    py_func's OpError its own code (Horovod's class: FailedPrecondition for a mismatch), where
    any other exception would be an UnknownError."""
    def run(*arrays):
        try:
            return body(*arrays)
        except _core.RondeError as error:
            raise errors.translate(error) from None
    return run


def _call(body, inputs, out_types, what):
    """Runs `body(*numpy inputs)` as a stateful graph op, or directly when eager; returns a
    list of tensors of `out_types`."""
    body = _translating(body)
    if tf.executing_eagerly():
        results = body(*[t.numpy() for t in inputs])
        if not isinstance(results, (list, tuple)):
            results = [results]
        return [tf.convert_to_tensor(r, dtype=d) for r, d in zip(results, out_types)]
    return tf.numpy_function(body, list(inputs), list(out_types), stateful=True,
                             name="ronde_" + what)


def _leading_unknown(shape):
    if shape.rank is None:
        return tf.TensorShape(None)
    if shape.rank == 0:
        return tf.TensorShape([None])
    return tf.TensorShape([None]).concatenate(shape[1:])


def allreduce(tensor, full_name, op, prescale, postscale, process_set):
    def body(array):
        return nops.allreduce(array, full_name, op, prescale, postscale, process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "allreduce")
    out.set_shape(tensor.shape)
    return out


def grouped_allreduce(tensors, names, op, prescale, postscale, process_set):
    def body(*arrays):
        return nops.grouped_allreduce(arrays, names, op, prescale, postscale,
                                      process_set).wait()
    outs = _call(body, tensors, [t.dtype for t in tensors], "grouped_allreduce")
    for out, t in zip(outs, tensors):
        out.set_shape(t.shape)
    return outs


def allreduce_start(tensor, full_name, op, prescale, postscale, process_set):
    """Submits an allreduce and returns an int64 handle tensor at once (see finish)."""
    def body(array):
        handle = next(_next_handle)
        _pending[handle] = nops.allreduce(array, full_name, op, prescale, postscale,
                                          process_set)
        return np.int64(handle)
    return _call(body, [tensor], [tf.int64], "allreduce_start")[0]


def finish(handle, dtype, shape):
    """Waits for the request behind `handle` and returns its result."""
    def body(number):
        pending = _pending.pop(int(number), None)
        if pending is None:
            raise ValueError("ronde: unknown or already finished handle %d" % int(number))
        return pending.wait()
    out, = _call(body, [handle], [dtype], "wait")
    out.set_shape(shape)
    return out


def allgather(tensor, full_name, process_set):
    def body(array):
        return nops.allgather(array, full_name, process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "allgather")
    out.set_shape(_leading_unknown(tensor.shape))
    return out


def grouped_allgather(tensors, names, process_set):
    def body(*arrays):
        return nops.grouped_allgather(arrays, names, process_set).wait()
    outs = _call(body, tensors, [t.dtype for t in tensors], "grouped_allgather")
    for out, t in zip(outs, tensors):
        out.set_shape(_leading_unknown(t.shape))
    return outs


def broadcast(tensor, root_rank, full_name, process_set):
    def body(array):
        return nops.broadcast(array, root_rank, full_name, process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "broadcast")
    out.set_shape(tensor.shape)
    return out


def alltoall(tensor, splits, full_name, process_set):
    inputs = [tensor] if splits is None else [tensor, splits]

    def body(array, split_values=None):
        return list(nops.alltoall(array, split_values, full_name, process_set).wait())
    out, received = _call(body, inputs, [tensor.dtype, tf.int32], "alltoall")
    out.set_shape(_leading_unknown(tensor.shape))
    received.set_shape([process_set.size()] if process_set.included() else [None])
    return out, received


def reducescatter(tensor, full_name, op, prescale, postscale, process_set):
    def body(array):
        return nops.reducescatter(array, full_name, op, prescale, postscale,
                                  process_set).wait()
    out, = _call(body, [tensor], [tensor.dtype], "reducescatter")
    out.set_shape(_leading_unknown(tensor.shape))
    return out


def grouped_reducescatter(tensors, names, op, prescale, postscale, process_set):
    def body(*arrays):
        return nops.grouped_reducescatter(arrays, names, op, prescale, postscale,
                                          process_set).wait()
    outs = _call(body, tensors, [t.dtype for t in tensors], "grouped_reducescatter")
    for out, t in zip(outs, tensors):
        out.set_shape(_leading_unknown(t.shape))
    return outs


def job_fact(read, what):
    """An int32 scalar that `read()` gives when the op runs (rank_op and friends)."""
    def body():
        return np.int32(read())
    out, = _call(body, [], [tf.int32], what)
    out.set_shape([])
    return out


def join():
    def body():
        return np.int32(nops.join().wait())
    out, = _call(body, [], [tf.int32], "join")
    out.set_shape([])
    return out


def barrier(process_set):
    def body():
        nops.barrier(process_set).wait()
        return np.int32(0)
    out, = _call(body, [], [tf.int32], "barrier")
    return out.op if not tf.executing_eagerly() else None


def differentiable(forward, backward):
    """`forward(*tensors)` as a function with `backward(dys, xs, ys)` as its gradient (the
    numpy bridge's ops have no registered gradient)."""
    @tf.custom_gradient
    def function(*xs):
        ys = forward(*xs)

        def grad(*dys):
            # After the forward op on every rank: the bridge's collectives block a session
            # thread, so two of them must not run in different orders on different ranks.
            outputs = list(ys) if isinstance(ys, (list, tuple)) else [ys]
            with tf.control_dependencies(outputs):
                return backward(dys, xs, ys)
        return ys, grad
    return function
