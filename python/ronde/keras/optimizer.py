"""Horovod's Keras DistributedOptimizer for Keras 3, on the tensorflow, torch and jax backends."""

import keras

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.keras import backend_ops, gradient_groups, local_gradients
from ronde.keras.compression import Compression
from ronde.keras.options import ReductionOptions


class _Accumulation:
    """Local gradient sums between reductions (backward_passes_per_step > 1)."""

    def __init__(self, variables):
        self.passes = keras.Variable(0, dtype="int64", trainable=False, name="ronde_passes")
        self.sums = [keras.Variable(keras.ops.zeros(v.shape, v.dtype), trainable=False,
                                    name="ronde_accumulator_%d" % i)
                     for i, v in enumerate(variables)]


class _DistributedMixin:
    """Overrides Keras 3's public `apply` (which apply_gradients and every backend's
    model.fit call): gradients are reduced over the ranks, then applied by the wrapped class.
    With backward_passes_per_step = N > 1 they are summed locally and reduced and applied
    on every N-th call only."""

    _ronde_distributed = True

    def _ronde_configure(self, options):
        self._ronde_options = options
        self._ronde_local = local_gradients.LocalVariables()
        self._ronde_accumulators = None
        passes = options.passes
        # Keras 3's JAX trainer applies gradients statelessly inside jax.jit, where the
        # accumulators below (variables the optimizer does not own) cannot change. There the
        # optimizer's own gradient accumulation keeps the sums, and the reduction runs only
        # on the N-th pass, inside its update (see _clip_gradients).
        self._ronde_jax_accumulates = keras.backend.backend() == "jax" and passes > 1
        if self._ronde_jax_accumulates:
            if isinstance(self, keras.optimizers.LossScaleOptimizer):
                raise ValueError("on the jax backend, backward_passes_per_step > 1 is not "
                                 "supported for a LossScaleOptimizer (its stateless step "
                                 "bypasses the accumulation)")
            own = self.gradient_accumulation_steps
            if own not in (None, passes):
                raise ValueError(
                    "backward_passes_per_step=%d and the optimizer's gradient_accumulation_steps"
                    "=%d disagree" % (passes, own))
            if self.built and own is None:
                raise ValueError(
                    "on the jax backend, wrap the optimizer in DistributedOptimizer with "
                    "backward_passes_per_step > 1 before it is built (before compile/fit)")
            self.gradient_accumulation_steps = passes

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        # Keras 3's JAX trainer calls this. A plain optimizer's calls `apply` (reduced above);
        # a LossScaleOptimizer's hands the gradients to its inner optimizer directly, so they
        # are reduced here, before its check for non-finite values: every rank then sees the
        # same values and skips or applies the same step.
        if isinstance(self, keras.optimizers.LossScaleOptimizer):
            # trainable_variables are values here; the variables (names, locality) are the
            # ones the optimizer was built with, in the same order.
            grads = self._ronde_reduce(list(grads), list(self._trainable_variables))
        return super().stateless_apply(optimizer_variables, grads, trainable_variables)

    def register_local_var(self, var):
        """Horovod's `register_local_var`: `var`'s gradient stays on this rank (not reduced;
        divided by the set's size when scale_local_gradients)."""
        self._ronde_local.add(var)

    def _ronde_reduce(self, grads, variables):
        options = self._ronde_options

        def reduce(shared_grads, shared_vars, indices):
            names = backend_ops.gradient_names(shared_vars, indices)
            plan = gradient_groups.plan(shared_grads, shared_vars, options.groups)
            return backend_ops.allreduce_gradients(shared_grads, names, options, plan)
        return local_gradients.reduce_shared(grads, variables, self._ronde_local,
                                             options.scale_local_gradients,
                                             options.process_set.size(), reduce,
                                             backend_ops.divide)

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))
        if self._ronde_jax_accumulates:
            return super().apply(grads, trainable_variables)
        if self._ronde_options.passes == 1:
            return super().apply(self._ronde_reduce(grads, variables), trainable_variables)
        return self._ronde_apply_aggregated(grads, variables)

    def _clip_gradients(self, grads):
        if not self._ronde_jax_accumulates:
            return super()._clip_gradients(grads)
        import jax

        passes = self._ronde_options.passes
        # Keras has averaged the N passes' gradients on an update pass (and passes this
        # pass's own gradients otherwise, whose update it then discards).
        scale = 1.0 if self._ronde_options.average_aggregated else float(passes)
        variables = list(self._trainable_variables)

        def reduce():
            summed = [g if g is None else g * scale for g in grads]
            return self._ronde_reduce(summed, variables)

        is_update = (self._iterations + 1) % passes == 0
        grads = jax.lax.cond(is_update, reduce, lambda: list(grads))
        return super()._clip_gradients(grads)

    def _ronde_apply_aggregated(self, grads, variables):
        if not self.built:
            self.build(variables)
            self.built = True
        if self._ronde_accumulators is None:
            # Created outside any branch (no variable can be made inside a tf.cond), and held
            # by a plain object so that the optimizer does not track (and save) them.
            self._ronde_accumulators = _Accumulation(variables)
        accumulation = self._ronde_accumulators
        for acc, grad in zip(accumulation.sums, grads):
            if grad is not None:
                acc.assign_add(keras.ops.convert_to_tensor(grad, acc.dtype))
        accumulation.passes.assign_add(1)
        passes = self._ronde_options.passes

        def reduce_and_apply():
            total = [keras.ops.convert_to_tensor(acc) for acc in accumulation.sums]
            if self._ronde_options.average_aggregated:
                total = [t / passes for t in total]
            keep = [i for i, g in enumerate(grads) if g is not None]
            reduced = self._ronde_reduce([total[i] for i in keep], [variables[i] for i in keep])
            super(_DistributedMixin, self).apply(reduced, [variables[i] for i in keep])
            for acc in accumulation.sums:
                acc.assign(keras.ops.zeros(acc.shape, acc.dtype))

        keras.ops.cond(keras.ops.equal(accumulation.passes % passes, 0),
                       reduce_and_apply, lambda: None)


def is_keras3_optimizer(optimizer):
    return isinstance(optimizer, keras.optimizers.Optimizer)


def wrap(optimizer, options, local_variables=()):
    """Makes the Keras 3 `optimizer` distributed in place and returns it (see
    DistributedOptimizer)."""
    if not is_keras3_optimizer(optimizer):
        hint = ("; a tf_keras (Keras 2) optimizer goes through ronde.tensorflow.keras"
                if type(optimizer).__module__.startswith("tf_keras") else "")
        raise TypeError("DistributedOptimizer wraps a Keras 3 optimizer, not %s%s"
                        % (type(optimizer).__name__, hint))
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError("%s is a DistributedOptimizer already" % type(optimizer).__name__)
    cls = optimizer.__class__
    if options.name is None:
        options.name = "Distributed" + cls.__name__
    optimizer.__class__ = type(cls.__name__, (_DistributedMixin, cls),
                               {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    optimizer._ronde_configure(options)
    for var in local_variables:
        optimizer.register_local_var(var)
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=nops.Average, num_groups=0,
                         groups=None, *, backward_passes_per_step=1,
                         average_aggregated_gradients=False, process_set=global_process_set,
                         scale_local_gradients=True):
    """Horovod's `horovod.keras.DistributedOptimizer` (same positional parameters), for Keras 3
    on its tensorflow, torch and jax backends: `apply`/`apply_gradients` (and so model.fit)
    apply gradients reduced over the ranks of `process_set` (op Average or Sum; Min, Max and
    Product are a ValueError as in Horovod; Adasum, which Horovod refuses with Keras, combines
    the gradients by Adasum on a power-of-two number of ranks).

    Differences: the optimizer is wrapped in place (its class becomes a subclass of its own
    class, under the same name, so saved models hold the plain optimizer and `load_model`
    re-wraps it) and returned, state kept; Horovod builds a new one from its config.
    `groups` (or the deprecated `num_groups`) reduces each group of gradients as one fused
    grouped allreduce; variables are matched by identity (Horovod: by name).
    `device_dense`/`device_sparse` are accepted: ronde reduces on the host. `name` names the
    reduction's scope on the tensorflow backend. Beyond horovod.keras, keyword-only as in
    horovod.tensorflow.keras: `backward_passes_per_step` (sum locally, reduce and apply every
    N-th call; `average_aggregated_gradients` divides the sum by N), `process_set`,
    `scale_local_gradients`.
    """
    options = ReductionOptions(name, compression, sparse_as_dense, gradient_predivide_factor,
                               op, backward_passes_per_step, average_aggregated_gradients,
                               num_groups, groups, process_set, scale_local_gradients)
    return wrap(optimizer, options)


def local_layer_variables(local_layers, layer_classes, class_name):
    """Horovod's rule for `local_layers`: None, one layer, or layers; their trainable weights."""
    if local_layers is None:
        return []
    if isinstance(local_layers, layer_classes):
        local_layers = [local_layers]
    else:
        local_layers = list(local_layers)
        if not all(isinstance(layer, layer_classes) for layer in local_layers):
            raise ValueError("All local layers must be of %s type." % class_name)
    return [var for layer in local_layers for var in layer.trainable_weights]


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=nops.Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """Horovod's `horovod.keras.PartialDistributedOptimizer`: DistributedOptimizer whose
    `local_layers` (a keras Layer or several) keep their gradients on this rank (not reduced;
    divided by the set's size when scale_local_gradients). The differences of
    DistributedOptimizer apply."""
    local = local_layer_variables(local_layers, keras.layers.Layer, "keras.layers.Layer")
    options = ReductionOptions(name, compression, sparse_as_dense, gradient_predivide_factor,
                               op, 1, False, 0, groups, process_set, scale_local_gradients)
    return wrap(optimizer, options, local)
