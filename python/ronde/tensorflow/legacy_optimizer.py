"""Horovod's DistributedOptimizer over a TF1 optimizer (`tf.compat.v1.train.Optimizer`), the
optimizer of Horovod's original tutorial: `opt = hvd.DistributedOptimizer(opt)`, then
`opt.minimize(loss)` in a graph (or eagerly with a loss callable).

compute_gradients() returns the gradients reduced over the ranks (gradient_reduction);
apply_gradients() applies them with the wrapped optimizer. With backward_passes_per_step > 1
gradients are summed locally and reduced and applied on every N-th step
(gradient_aggregation, graph mode only, as Horovod's). op=Adasum combines each rank's
*update* instead of its gradient (Horovod's delta optimizer), so that optimizers whose step is
not linear in the gradient keep their own state.
"""

import tensorflow as tf

from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.tensorflow import collectives, gradient_reduction
from ronde.tensorflow.gradient_aggregation import LocalGradientAggregationHelper

_V1Optimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_V1Optimizer):
    """The wrapper DistributedOptimizer returns for a TF1 optimizer."""

    def __init__(self, optimizer, name, use_locking, device_dense, device_sparse, compression,
                 sparse_as_dense, op, gradient_predivide_factor, backward_passes_per_step,
                 average_aggregated_gradients, groups, process_set, scale_local_gradients):
        name = name or "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._reduction = dict(
            compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, groups=groups,
            process_set=process_set, device_dense=device_dense, device_sparse=device_sparse,
            scale_local_gradients=scale_local_gradients)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_vars = []
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if tf.executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not yet supported for "
                                 "_LegacyOptimizer with eager execution.")
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step=backward_passes_per_step,
                allreduce_func=self._reduce, sparse_as_dense=sparse_as_dense,
                average_aggregated_gradients=average_aggregated_gradients, rank=_core.rank(),
                optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                process_set=process_set, scale_local_gradients=scale_local_gradients, name=name)

    def _reduce(self, grads, variables):
        local = self._agg_helper._local_vars if self._agg_helper else self._local_vars
        # A name scope of its own per call: TensorFlow makes it unique in the graph, so two
        # reductions of the same variables never share a request name.
        with tf.name_scope(self._name + "_Allreduce"):
            return gradient_reduction.reduce_gradients(grads, variables, local_variables=local,
                                                       **self._reduction)

    def register_local_var(self, var):
        """Horovod's `register_local_var`: `var`'s gradient is not reduced; it stays this
        rank's own (divided by the set's size when scale_local_gradients)."""
        if self._agg_helper:
            self._agg_helper.register_local_var(var)
        elif all(var is not v for v in self._local_vars):
            self._local_vars.append(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, reduced over the ranks: [(gradient, variable)]."""
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if not gradients:
            return gradients
        grads, variables = zip(*gradients)
        if self._agg_helper:
            reduced = self._agg_helper.compute_gradients(grads, variables)
        else:
            reduced = self._reduce(grads, variables)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients (on the reducing steps only, with
        backward_passes_per_step > 1)."""
        if self._agg_helper:
            grads_and_vars = list(grads_and_vars)
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                        name=name),
                self._optimizer, grads_and_vars, global_step=global_step, name=name)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


class _DistributedAdasumOptimizer(_V1Optimizer):
    """op=Adasum: each rank applies its own gradients with the wrapped optimizer, then the
    update (value after - value before) of every variable is combined across the ranks with
    Adasum, and every variable becomes its value before plus the combined update. With
    backward_passes_per_step N the ranks combine every N-th step, from the values they had
    after the last combination (each rank's own steps in between)."""

    def __init__(self, optimizer, name, use_locking, device_dense, device_sparse, compression,
                 backward_passes_per_step):
        name = name or "DistributedDelta%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._device_dense = device_dense
        self._compression = compression
        self._passes = int(backward_passes_per_step)
        self._starts = {}  # id(variable) -> (variable, its value at the last combination)
        self._step = None

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _start_of(self, var):
        if id(var) not in self._starts:
            with tf.init_scope():  # the first step sets it (see apply_gradients)
                start = tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                    name="%s_delta_start" % var.name.split(":")[0])
            self._starts[id(var)] = (var, start)
        return self._starts[id(var)][1]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if self._step is None:
            with tf.init_scope():
                self._step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name=self._name + "_step")
        variables = [v for _, v in grads_and_vars]
        starts = [self._start_of(v) for v in variables]
        first = tf.equal(self._step, 0)

        def remember():
            return tf.group(*[s.assign(v) for s, v in zip(starts, variables)])
        begun = tf.cond(first, remember, tf.no_op)
        with tf.control_dependencies([begun]):
            applied = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                      name=name)
        with tf.control_dependencies([applied]):
            counted = self._step.assign_add(1)

        def combine():
            deltas = [v.read_value() - s for v, s in zip(variables, starts)]
            combined = collectives.grouped_allreduce(
                deltas, device_dense=self._device_dense, compression=self._compression,
                op=nops.Adasum)
            updates = [s.assign_add(d) for s, d in zip(starts, combined)]
            with tf.control_dependencies(updates):
                return tf.group(*[v.assign(s) for v, s in zip(variables, starts)])
        with tf.control_dependencies([counted]):
            return tf.cond(tf.equal(counted % self._passes, 0), combine, tf.no_op)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def distributed_optimizer(optimizer, name, use_locking, device_dense, device_sparse,
                          compression, sparse_as_dense, backward_passes_per_step, op,
                          gradient_predivide_factor, average_aggregated_gradients, groups,
                          process_set, scale_local_gradients):
    """The wrapper of a TF1 optimizer (ronde.tensorflow.DistributedOptimizer decides)."""
    if op == nops.Adasum:
        if process_set.process_set_id != 0:
            raise NotImplementedError("Adasum does not support process sets yet")
        return _DistributedAdasumOptimizer(optimizer, name, use_locking, device_dense,
                                           device_sparse, compression, backward_passes_per_step)
    return _DistributedOptimizer(optimizer, name, use_locking, device_dense, device_sparse,
                                 compression, sparse_as_dense, op, gradient_predivide_factor,
                                 backward_passes_per_step, average_aggregated_gradients, groups,
                                 process_set, scale_local_gradients)
