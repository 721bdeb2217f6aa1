"""How DistributedGradientTape, DistributedOptimizer (TF1 and Keras on the tensorflow backend)
and the gradient aggregation reduce a list of gradients: Horovod's options, one
implementation.

- `op` Average with `gradient_predivide_factor` f: scaled by 1/f before the sum and f/size
  after it (the runtime's Average applies the 1/size);
- `sparse_as_dense`: IndexedSlices become dense tensors first; otherwise they are
  allgathered (collectives.allreduce);
- `groups`: None reduces every gradient on its own (all submitted before any is waited for:
  the runtime fuses whatever is ready together); an int n splits the gradients into n groups
  and a list of lists of variables names the groups (variables in no list form a group each),
  and each group is one grouped_allreduce, negotiated and fused as one;
- local variables (register_local_var / register_local_source) keep their local gradient,
  divided by the set's size when `scale_local_gradients` (Horovod's rule, so that local and
  reduced gradients are on the same scale).
"""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.tensorflow import collectives, mpi_ops, numpy_path
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.util import split_list


def check_options(op, gradient_predivide_factor, num_groups, groups):
    """Horovod's checks of the wrappers' options; returns the groups to use."""
    op = nops.check_op(op)
    if gradient_predivide_factor != 1.0 and op != nops.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups:
        import warnings
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or
                                   (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    return groups


def gradient_name(variable, index):
    """A gradient's request name: its position and its variable's name (every rank builds the
    same model, so both agree)."""
    name = getattr(variable, "path", None) or getattr(variable, "name", None)
    return "grad.%d.%s" % (index, name) if name else "grad.%d" % index


def _scales(op, gradient_predivide_factor):
    if op != nops.Average:
        return 1.0, 1.0
    return 1.0 / gradient_predivide_factor, float(gradient_predivide_factor)


def _group_indices(grads, variables, groups):
    """Lists of positions of the non-None gradients, one list per group."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if isinstance(groups, int):
        return [chunk for chunk in split_list(present, groups) if chunk]
    position = {id(v): i for i, v in enumerate(variables)}  # Keras 3 variables have no ref()
    taken, result = set(), []
    for group in groups:
        members = []
        for var in group:
            i = position.get(id(var))
            if i is not None and grads[i] is not None and i not in taken:
                members.append(i)
                taken.add(i)
        if members:
            result.append(members)
    result.extend([i] for i in present if i not in taken)
    return result


def reduce_gradients(grads, variables, compression=Compression.none, sparse_as_dense=False,
                     op=nops.Average, gradient_predivide_factor=1.0, groups=None,
                     process_set=global_process_set, device_dense="", device_sparse="",
                     local_variables=(), scale_local_gradients=True, names=None):
    """The gradients reduced over `process_set` (None stays None), in the order given."""
    grads = list(grads)
    variables = list(variables)
    if not process_set.included():
        return grads
    if sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
    local = {id(v) for v in local_variables}
    is_local = [v is not None and id(v) in local for v in variables]
    shared = [None if is_local[i] else g for i, g in enumerate(grads)]
    if names is None:
        names = [gradient_name(v, i) for i, v in enumerate(variables)]
    prescale, postscale = _scales(op, gradient_predivide_factor)
    if groups is None:
        reduced = _one_by_one(shared, names, compression, op, prescale, postscale, process_set,
                              device_dense, device_sparse)
    else:
        reduced = [None] * len(grads)
        for members in _group_indices(shared, variables, groups):
            results = collectives.grouped_allreduce(
                [shared[i] for i in members], device_dense=device_dense,
                device_sparse=device_sparse, compression=compression, op=op,
                prescale_factor=prescale, postscale_factor=postscale, process_set=process_set)
            for i, r in zip(members, results):
                reduced[i] = r
    for i, g in enumerate(grads):
        if is_local[i] and g is not None:
            reduced[i] = _scaled_local(g, process_set) if scale_local_gradients else g
    return reduced


def _scaled_local(grad, process_set):
    size = collectives._set_size(process_set, grad.dtype)
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / size


def _one_by_one(grads, names, compression, op, prescale, postscale, process_set, device_dense,
                device_sparse):
    """Every dense gradient submitted before any is waited for: the compiled kernels are
    asynchronous ops, so one op each does both; the numpy bridge splits each into a submitting
    and a waiting op."""
    results = [None] * len(grads)
    started = []
    for i, (grad, name) in enumerate(zip(grads, names)):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            results[i] = collectives.allreduce(grad, op=op, device_sparse=device_sparse,
                                               process_set=process_set)
            continue
        with tf.device(device_dense):
            compressed, ctx = compression.compress(grad)
            if mpi_ops._ops is not None:
                reduced = mpi_ops.allreduce_raw(compressed, name, op, prescale, postscale,
                                                process_set)
                results[i] = compression.decompress(reduced, ctx)
                continue
            mpi_ops._check(compressed, "allreduce")
            full_name = mpi_ops._name("allreduce", name, process_set)
            handle = numpy_path.allreduce_start(compressed, full_name, op, prescale, postscale,
                                                process_set)
            started.append((i, handle, compressed, ctx))
    for i, handle, compressed, ctx in started:
        with tf.device(device_dense):
            reduced = numpy_path.finish(handle, compressed.dtype, compressed.shape)
            results[i] = compression.decompress(reduced, ctx)
    return results


def allreduce_gradients(grads, names, compression=Compression.none, sparse_as_dense=False,
                        op=nops.Average, gradient_predivide_factor=1.0,
                        process_set=global_process_set):
    """The gradients reduced one by one under the given names (ronde.keras's tensorflow
    backend calls this)."""
    grads = list(grads)
    return reduce_gradients(grads, [None] * len(grads), compression, sparse_as_dense,
                            nops.check_op(op), gradient_predivide_factor,
                            process_set=process_set, names=list(names))
