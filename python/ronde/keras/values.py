"""Horovod's keras-level collectives (`horovod.keras.allreduce`, `allgather`, `broadcast`,
`reducescatter`) for Keras 3 on any backend: they take a value (array-like or tensor) and
return the result as a tensor of the backend. The value crosses ranks as a numpy array."""

import keras
import numpy as np

from ronde.common import numpy_ops as nops
from ronde.keras.compression import Compression


def _host(value, what):
    nops.check_initialized(what)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(value)))


def allreduce(value, name=None, average=True, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Horovod's `horovod.keras.allreduce`: `value` reduced over every rank. As in Horovod,
    `op` supersedes the deprecated `average`, and passing both (average defaults to True) is
    a ValueError: pass average=None with op."""
    op = nops.check_op(op, average)
    nops.check_initialized("allreduce")
    compressed, context = compression.compress(keras.ops.convert_to_tensor(value))
    reduced = nops.allreduce(_host(compressed, "allreduce"), nops.request_name("allreduce", name),
                             op, prescale_factor, postscale_factor).wait()
    return compression.decompress(keras.ops.convert_to_tensor(reduced), context)


def allgather(value, name=None):
    """Horovod's `horovod.keras.allgather`: every rank's value concatenated along the first
    dimension (which may differ by rank)."""
    gathered = nops.allgather(_host(value, "allgather"),
                              nops.request_name("allgather", name)).wait()
    return keras.ops.convert_to_tensor(gathered)


def broadcast(value, root_rank, name=None):
    """Horovod's `horovod.keras.broadcast`: root_rank's value on every rank."""
    received = nops.broadcast(_host(value, "broadcast"), root_rank,
                              nops.request_name("broadcast", name)).wait()
    return keras.ops.convert_to_tensor(received)


def reducescatter(value, name=None, op=nops.Average):
    """Horovod's `horovod.keras.reducescatter`: this rank's share of the first dimension of the
    reduction (the first `rows % size` ranks get one extra row)."""
    op = nops.check_op(op)
    share = nops.reducescatter(_host(value, "reducescatter"),
                               nops.request_name("reducescatter", name), op).wait()
    return keras.ops.convert_to_tensor(share)
