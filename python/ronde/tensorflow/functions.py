"""Horovod's helpers on TensorFlow variables and Python objects."""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common.objects import allgather_object, broadcast_object  # noqa: F401
from ronde.common.process_sets import global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Horovod's `hvd.broadcast_variables`: assigns root_rank's value to every variable (a
    global rank, also in a process set). All broadcasts are submitted before any is waited
    for, so the runtime fuses them. Works eagerly and inside tf.function."""
    variables = list(variables)
    if not variables:
        return tf.no_op() if not tf.executing_eagerly() else None
    nops.check_initialized("broadcast_variables")
    from ronde.tensorflow.mpi_ops import _check, _call
    values = [tf.convert_to_tensor(v) for v in variables]
    for v in values:
        _check(v, "broadcast_variables")
    nops.root_index(root_rank, process_set)
    base = nops.request_name("broadcast_variables", None, process_set)
    names = ["%s.%d" % (base, i) for i in range(len(values))]

    def body(*arrays):
        pending = [nops.broadcast(a, root_rank, n, process_set) for a, n in zip(arrays, names)]
        return [p.wait() for p in pending]
    results = _call(body, values, [v.dtype for v in values], "broadcast_variables")
    assigns = [var.assign(tf.reshape(r, tf.shape(var))) for var, r in zip(variables, results)]
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns)
