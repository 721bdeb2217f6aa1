"""Horovod's keras-level collectives of `horovod.tensorflow.keras`: they take a value, run
ronde.tensorflow's op on it and return the evaluated result: the eager tensor, or in TF1 graph
mode the numpy value that Keras 2's session (K.get_session()) computes, as Horovod does."""

import tensorflow as tf

import ronde.tensorflow as rtf
from ronde.common import numpy_ops as nops
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.keras.world import keras2_session, tf_keras_is_keras2


def _evaluate(result):
    if tf.executing_eagerly():
        return result
    if not tf_keras_is_keras2():
        raise RuntimeError("TF1 graph mode (eager execution disabled) needs Keras 2: set "
                           "TF_USE_LEGACY_KERAS=1 (with tf_keras installed) before importing "
                           "TensorFlow")
    return keras2_session().run(result)


def _constant(value, name):
    return tf.constant(value, name=name) if name else tf.constant(value)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Horovod's `horovod.tensorflow.keras.allreduce`: `value` reduced over every rank (op
    Average unless given; `average` is its deprecated spelling). `name` names the constant
    and the request."""
    op = nops.check_op(op, average)
    return _evaluate(rtf.allreduce(_constant(value, name), op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, compression=compression,
                                   name=name))


def allgather(value, name=None):
    """Horovod's `horovod.tensorflow.keras.allgather`: every rank's value concatenated along
    the first dimension (which may differ by rank)."""
    return _evaluate(rtf.allgather(_constant(value, name), name=name))


def broadcast(value, root_rank, name=None):
    """Horovod's `horovod.tensorflow.keras.broadcast`: root_rank's value on every rank."""
    return _evaluate(rtf.broadcast(_constant(value, name), root_rank, name=name))


def reducescatter(value, name=None, op=nops.Average):
    """Horovod's `horovod.tensorflow.keras.reducescatter`: this rank's share of the first
    dimension of the reduction (the first `rows % size` ranks get one extra row)."""
    return _evaluate(rtf.reducescatter(_constant(value, name), op=op, name=name))


def broadcast_global_variables(root_rank):
    """Horovod's `horovod.tensorflow.keras.broadcast_global_variables(root_rank)`: in TF1 graph
    mode, root_rank's values of every global variable (tf.compat.v1.global_variables()), run
    in Keras's session; eagerly a RuntimeError, as in Horovod."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` "
                           "instead.")
    return _evaluate(rtf.broadcast_variables(tf.compat.v1.global_variables(), root_rank))
