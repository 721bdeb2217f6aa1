"""`ronde.tensorflow.keras.DistributedOptimizer` and `PartialDistributedOptimizer`: Horovod's
signatures, for an optimizer of either Keras world (a Keras 3 one, or a tf_keras one), whatever
tf.keras is."""

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.keras import optimizer as keras3_optimizer
from ronde.keras.options import ReductionOptions
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.keras import keras2_optimizer, world


def _wrap(optimizer, options, local_variables=()):
    if keras3_optimizer.is_keras3_optimizer(optimizer):
        return keras3_optimizer.wrap(optimizer, options, local_variables)
    if world.is_keras2_optimizer(optimizer):
        return keras2_optimizer.wrap(optimizer, options, local_variables)
    raise TypeError("DistributedOptimizer wraps a Keras optimizer (Keras 3, or tf_keras's new "
                    "or legacy ones), not %s" % type(optimizer).__name__)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=nops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Horovod's `horovod.tensorflow.keras.DistributedOptimizer`, for a Keras 3 optimizer or a
    tf_keras (Keras 2) one, new or legacy, LossScaleOptimizer included.

    Keras 2, as Horovod: the gradients are reduced in compute_gradients / _compute_gradients
    / get_gradients (minimize, model.fit, TF1 graph-mode training), not in apply_gradients;
    with backward_passes_per_step = N > 1 they are summed locally, reduced on every N-th pass
    (divided by N with average_aggregated_gradients) and applied then, and the other passes
    only count the optimizer's iterations. Keras 3: see ronde.keras.DistributedOptimizer
    (reduced in `apply`).

    Both: op Average or Sum (Min, Max, Product are a ValueError, as in Horovod; Adasum, which
    Horovod refuses with Keras, combines the gradients by Adasum on a power-of-two number of
    ranks);
    gradient_predivide_factor with op=Sum is a ValueError (horovod.tensorflow.keras ignores
    it); `groups` (or the deprecated `num_groups`) reduces each group as one fused grouped
    allreduce, variables matched by identity (Horovod: by name) and fp16 and fp32 members
    kept apart by the runtime; `process_set` reduces within a set (a rank outside it keeps
    its own gradients); `scale_local_gradients` divides the gradients of variables
    registered local (`register_local_var`) by the set's size. The optimizer is wrapped in
    place (its class becomes a subclass of its own class, under the same name) and
    returned, state kept; Horovod builds a new one from its config. `device_dense` and
    `device_sparse` are accepted: ronde reduces on the host. `name` names the reduction's
    scope in the graph.
    """
    options = ReductionOptions(name, compression, sparse_as_dense, gradient_predivide_factor,
                               op, backward_passes_per_step, average_aggregated_gradients,
                               num_groups, groups, process_set, scale_local_gradients)
    return _wrap(optimizer, options)


def _layer_classes():
    import keras
    classes = [keras.layers.Layer]
    keras2_layer = world.keras2_layer_class()
    if keras2_layer is not None:
        classes.append(keras2_layer)
    return tuple(classes)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=nops.Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """Horovod's `horovod.keras.PartialDistributedOptimizer` (horovod.tensorflow.keras has
    none): DistributedOptimizer whose `local_layers` (a Keras layer of either world, or
    several) keep their gradients on this rank (not reduced; divided by the set's size when
    scale_local_gradients)."""
    local = keras3_optimizer.local_layer_variables(local_layers, _layer_classes(),
                                                   "tf.keras.layers.Layer")
    options = ReductionOptions(name, compression, sparse_as_dense, gradient_predivide_factor,
                               op, 1, False, 0, groups, process_set, scale_local_gradients)
    return _wrap(optimizer, options, local)
