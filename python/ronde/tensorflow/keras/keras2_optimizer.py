"""Horovod's DistributedOptimizer for Keras 2 (tf_keras): its new `tf_keras.optimizers.Optimizer`
classes and the legacy `tf_keras.optimizers.legacy` ones (OptimizerV2), LossScaleOptimizer
included. As in Horovod (horovod/_keras/__init__.py), gradients are reduced where Keras 2
computes them: `compute_gradients` (new) / `_compute_gradients` (legacy), which `minimize` and
so model.fit call, and `get_gradients`, which TF1 graph-mode training calls; `apply_gradients`
applies what it is given (a DistributedGradientTape's gradients are not reduced twice)."""

from ronde.keras import gradient_groups, local_gradients, reduce_tensorflow
from ronde.tensorflow.keras.keras2_accumulation import GradientAccumulation


class _CallableList(list):
    """Horovod's shim: `optimizer.variables` and `optimizer.variables()` both work."""

    def __call__(self):
        return self


class _State:
    """Held by one plain attribute, so that the optimizer neither tracks nor saves it."""

    def __init__(self, options):
        self.options = options
        self.local = local_gradients.LocalVariables()
        self.accumulation = None
        if options.passes > 1:
            self.accumulation = GradientAccumulation(options.passes, options.average_aggregated,
                                                     options.sparse_as_dense)


class _Keras2Distributed:
    _ronde_distributed = True

    def register_local_var(self, var):
        """Horovod's `register_local_var`: `var`'s gradient stays on this rank (not reduced;
        divided by the set's size when scale_local_gradients)."""
        self._ronde.local.add(var)

    @property
    def variables(self):
        own = super().variables
        return _CallableList(own if isinstance(own, list) else own())

    def compute_gradients(self, loss, var_list, tape=None):
        return self._compute_gradients(loss, var_list, None, tape)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        base = super()
        if hasattr(base, "_compute_gradients"):  # legacy, and its LossScaleOptimizer
            pairs = base._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)
        else:
            pairs = base.compute_gradients(loss, var_list, tape=tape)
        pairs = list(pairs)
        variables = [v for _, v in pairs]
        reduced = self._ronde_allreduce([g for g, _ in pairs], variables)
        return list(zip(reduced, variables))

    def get_gradients(self, loss, params):
        grads = super().get_gradients(loss, params)
        return self._ronde_allreduce(list(grads), list(params))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        accumulation = self._ronde.accumulation
        if accumulation is None:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        pairs = list(grads_and_vars)
        iterations = self.iterations  # made outside the branches below

        def apply():
            return super(_Keras2Distributed, self).apply_gradients(pairs, *args, **kwargs)

        def count_iteration():
            return iterations.assign_add(1)
        return accumulation.apply_gradients([g for g, _ in pairs], apply, count_iteration)

    def _ronde_allreduce(self, grads, variables):
        accumulation = self._ronde.accumulation
        if accumulation is None:
            return self._ronde_reduce(grads, variables)
        return accumulation.compute_gradients(
            grads, lambda totals: self._ronde_reduce(totals, variables))

    def _ronde_reduce(self, grads, variables):
        options = self._ronde.options

        def reduce(shared_grads, shared_vars, indices):
            names = ["grad.%d.%s" % (i, v.name) for i, v in zip(indices, shared_vars)]
            plan = gradient_groups.plan(shared_grads, shared_vars, options.groups)
            return reduce_tensorflow.allreduce_gradients(shared_grads, names, options, plan)
        return local_gradients.reduce_shared(grads, variables, self._ronde.local,
                                             options.scale_local_gradients,
                                             options.process_set.size(), reduce,
                                             reduce_tensorflow.divide)


def wrap(optimizer, options, local_variables=()):
    """Makes the tf_keras `optimizer` distributed in place and returns it."""
    if isinstance(optimizer, _Keras2Distributed):
        raise ValueError("%s is a DistributedOptimizer already" % type(optimizer).__name__)
    cls = optimizer.__class__
    if options.name is None:
        options.name = "Distributed" + cls.__name__
    optimizer.__class__ = type(cls.__name__, (_Keras2Distributed, cls),
                               {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    optimizer._ronde = _State(options)
    for var in local_variables:
        optimizer.register_local_var(var)
    return optimizer
