"""Horovod's helpers on TensorFlow variables and Python objects (`horovod.tensorflow.functions`
and `broadcast_global_variables`), eagerly, inside tf.function and in TF1 graphs."""

import tensorflow as tf

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common import objects
from ronde.common.process_sets import global_process_set
from ronde.tensorflow import errors, mpi_ops


def _variables_eagerly(variables, root_rank, process_set):
    """Eagerly: every broadcast is submitted before any is waited for, so the runtime
    negotiates and fuses them as one (an eager op would wait for each in turn)."""
    base = nops.request_name("broadcast_variables", None, process_set)
    pending = []
    for i, var in enumerate(variables):
        value = tf.convert_to_tensor(var)
        mpi_ops._check(value, "broadcast_variables")
        pending.append(nops.broadcast(value.numpy(), root_rank, "%s.%d" % (base, i),
                                      process_set))
    for var, p in zip(variables, pending):
        try:
            var.assign(p.wait())
        except _core.RondeError as error:
            raise errors.translate(error) from None


def assign_broadcast(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's values to `variables`; returns their new values (eagerly) or the
    tensors that read them after the assignment (in a graph)."""
    nops.check_initialized("broadcast_variables")
    try:
        nops.root_index(root_rank, process_set)
    except ValueError as error:
        raise errors.invalid_argument(str(error)) from None
    if not variables:
        return []
    if tf.executing_eagerly():
        _variables_eagerly(variables, root_rank, process_set)
        return [tf.convert_to_tensor(v) for v in variables]
    # In a graph every broadcast is an op of its own; they run concurrently and the runtime
    # fuses them.
    values = []
    for i, var in enumerate(variables):
        member = None if name is None else "%s.%d" % (name, i)
        received = mpi_ops.broadcast(var, root_rank, name=member, process_set=process_set)
        values.append(var.assign(received))
    return [tf.convert_to_tensor(v) for v in values]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Horovod's `hvd.broadcast_variables`: assigns root_rank's value to every variable (a
    global rank, also in a process set). Eagerly it returns when they are assigned; in a graph
    it returns the op that assigns them. `inplace` chooses Horovod's in-place kernel there;
    ronde assigns the broadcast value either way, with the same result."""
    del inplace
    variables = list(variables)
    assigned = assign_broadcast(variables, root_rank, None, process_set)
    if tf.executing_eagerly():
        return None
    return tf.group(*assigned)


def broadcast_global_variables(root_rank):
    """Horovod's `hvd.broadcast_global_variables` (TF1): the op that assigns root_rank's
    values to every global variable of the default graph. RuntimeError eagerly, as Horovod."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's `hvd.broadcast_object`: root_rank's `obj` (anything picklable) on every rank.
    It runs through the runtime directly, in a TF1 graph as eagerly: the `session` Horovod
    needs there is accepted and not needed."""
    del session
    return objects.broadcast_object(obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's `hvd.broadcast_object_fn`: a function obj -> root_rank's obj, for calling
    many times (Horovod builds its graph once; ronde needs none)."""
    del session

    def broadcast(obj):
        return objects.broadcast_object(obj, root_rank, name, process_set)
    return broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Horovod's `hvd.allgather_object`: the list of every member's `obj`, in rank order."""
    del session
    return objects.allgather_object(obj, name, process_set)
