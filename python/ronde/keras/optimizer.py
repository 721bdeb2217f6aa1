"""Horovod's Keras DistributedOptimizer for Keras 3, on the tensorflow, torch and jax backends."""

import keras

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.keras.backend_ops import allreduce_gradients
from ronde.keras.compression import Compression


class _Accumulation:
    """Local gradient sums between reductions (backward_passes_per_step > 1)."""

    def __init__(self, variables):
        self.passes = keras.Variable(0, dtype="int64", trainable=False, name="ronde_passes")
        self.sums = [keras.Variable(keras.ops.zeros(v.shape, v.dtype), trainable=False,
                                    name="ronde_accumulator_%d" % i)
                     for i, v in enumerate(variables)]


class _Slot:
    """Names an accumulated gradient by its position (all ranks hold the same list)."""

    def __init__(self, index):
        self.path = "accumulated.%d" % index


class _DistributedMixin:
    """Overrides Keras 3's public `apply` (which apply_gradients and every backend's
    model.fit call): gradients are reduced over the ranks, then applied by the wrapped class.
    With backward_passes_per_step = N > 1 they are summed locally and reduced and applied
    on every N-th call only."""

    _ronde_distributed = True

    def _ronde_configure(self, compression, sparse_as_dense, backward_passes_per_step, op,
                         gradient_predivide_factor, average_aggregated_gradients, process_set):
        op = nops.check_op(op)
        if gradient_predivide_factor != 1.0 and op != nops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be >= 1, not %r"
                             % (backward_passes_per_step,))
        self._ronde_compression = compression
        self._ronde_sparse_as_dense = sparse_as_dense
        self._ronde_passes = int(backward_passes_per_step)
        self._ronde_op = op
        self._ronde_prescale = 1.0 / gradient_predivide_factor
        self._ronde_postscale = float(gradient_predivide_factor)
        self._ronde_average_aggregated = average_aggregated_gradients
        self._ronde_process_set = process_set
        self._ronde_accumulators = None
        # Keras 3's JAX trainer applies gradients statelessly inside jax.jit, where the
        # accumulators below (variables the optimizer does not own) cannot change. There the
        # optimizer's own gradient accumulation keeps the sums, and the reduction runs only
        # on the N-th pass, inside its update (see _clip_gradients).
        self._ronde_jax_accumulates = keras.backend.backend() == "jax" and self._ronde_passes > 1
        if self._ronde_jax_accumulates:
            own = self.gradient_accumulation_steps
            if own not in (None, self._ronde_passes):
                raise ValueError(
                    "backward_passes_per_step=%d and the optimizer's gradient_accumulation_steps"
                    "=%d disagree" % (self._ronde_passes, own))
            if self.built and own is None:
                raise ValueError(
                    "on the jax backend, wrap the optimizer in DistributedOptimizer with "
                    "backward_passes_per_step > 1 before it is built (before compile/fit)")
            self.gradient_accumulation_steps = self._ronde_passes

    def _ronde_reduce(self, grads, variables):
        return allreduce_gradients(list(grads), variables, self._ronde_compression,
                                   self._ronde_sparse_as_dense, self._ronde_op,
                                   self._ronde_prescale, self._ronde_postscale,
                                   self._ronde_process_set)

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))
        if self._ronde_jax_accumulates:
            return super().apply(grads, trainable_variables)
        if self._ronde_passes == 1:
            return super().apply(self._ronde_reduce(grads, variables), trainable_variables)
        return self._ronde_apply_aggregated(grads, variables)

    def _clip_gradients(self, grads):
        if not self._ronde_jax_accumulates:
            return super()._clip_gradients(grads)
        import jax

        passes = self._ronde_passes
        # Keras has averaged the N passes' gradients on an update pass (and passes this
        # pass's own gradients otherwise, whose update it then discards).
        scale = 1.0 if self._ronde_average_aggregated else float(passes)
        slots = [None if g is None else _Slot(i) for i, g in enumerate(grads)]

        def reduce():
            summed = [g if g is None else g * scale for g in grads]
            return self._ronde_reduce(summed, slots)

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
        passes = self._ronde_passes

        def reduce_and_apply():
            total = [keras.ops.convert_to_tensor(acc) for acc in accumulation.sums]
            if self._ronde_average_aggregated:
                total = [t / passes for t in total]
            keep = [i for i, g in enumerate(grads) if g is not None]
            reduced = self._ronde_reduce([total[i] for i in keep], [variables[i] for i in keep])
            super(_DistributedMixin, self).apply(reduced, [variables[i] for i in keep])
            for acc in accumulation.sums:
                acc.assign(keras.ops.zeros(acc.shape, acc.dtype))

        keras.ops.cond(keras.ops.equal(accumulation.passes % passes, 0),
                       reduce_and_apply, lambda: None)


def DistributedOptimizer(optimizer, name=None, compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=nops.Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         process_set=global_process_set, **unused):
    """Horovod's `hvd.DistributedOptimizer` for Keras 3 (`ronde.keras` on any of its tensorflow,
    torch and jax backends): `apply`/`apply_gradients` (and so model.fit) apply gradients
    reduced over the ranks of `process_set`.

    The optimizer is wrapped in place (its class becomes a subclass of its own class, under
    the same name, so saved models hold the plain optimizer and `load_model` re-wraps it)
    and returned; its state and hyperparameters are kept. `backward_passes_per_step` sums
    gradients locally and reduces and applies them every N-th call
    (`average_aggregated_gradients` divides the sum by N). `name` and the `device_*`
    arguments are accepted for Horovod's signature.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("DistributedOptimizer wraps a Keras 3 optimizer, not %s"
                        % type(optimizer).__name__)
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError("%s is a DistributedOptimizer already" % type(optimizer).__name__)
    cls = optimizer.__class__
    optimizer.__class__ = type(cls.__name__, (_DistributedMixin, cls),
                               {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    optimizer._ronde_configure(compression, sparse_as_dense, backward_passes_per_step, op,
                               gradient_predivide_factor, average_aggregated_gradients,
                               process_set)
    return optimizer
