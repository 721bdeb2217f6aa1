"""Horovod's LocalGradientAggregationHelper for TF1 graphs: gradients are summed locally over
`backward_passes_per_step` passes, reduced over the ranks on the last of them, and applied
then; the passes between only add to the sums (and count the optimizer's iterations and the
global step, as Horovod does). Every rank passes the same number of times, so all take the
reducing branch together.

Graph mode only, as Horovod's: eagerly (or inside a tf.function) variables cannot be created
on every call; DistributedGradientTape users aggregate in their own loop, and Keras 3's
DistributedOptimizer has its own aggregation (ronde.keras).
"""

import tensorflow as tf

from ronde.common.process_sets import global_process_set


class LocalGradientAggregationHelper:
    """Horovod's class of the same name: `compute_gradients(grads, vars)` returns the reduced
    gradients on the reducing pass and this pass's own otherwise; `apply_gradients(apply,
    optimizer, grads_and_vars, global_step=..., name=...)` applies on the reducing pass only."""

    _OPTIMIZER_TYPE_KERAS = "optimizer_type_keras"
    _OPTIMIZER_TYPE_LEGACY = "optimizer_type_legacy"

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, rank, optimizer_type,
                 process_set=global_process_set, scale_local_gradients=True, name=""):
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        if tf.executing_eagerly():
            raise ValueError("LocalGradientAggregationHelper builds a TF1 graph; it does not "
                             "run eagerly")
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._allreduce_grads = allreduce_func  # (grads, vars) -> reduced grads
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.rank = rank
        self.optimizer_type = optimizer_type
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.name = name
        self.counter = None
        self.locally_aggregated_grads = []
        self._local_vars = []

    def register_local_var(self, var):
        """The gradient of `var` is not reduced (see DistributedOptimizer.register_local_var)."""
        if all(var is not v for v in self._local_vars):
            self._local_vars.append(var)

    def _dense(self, grad):
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` "
                                 "> 1 and `sparse_as_dense` is False.")
            return tf.convert_to_tensor(grad)
        return grad

    def _make_variables(self, grads):
        scope = "aggregation_variables_%s%d" % (self.name, self.rank)
        with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
            self.counter = tf.compat.v1.get_variable(
                "aggregation_counter", shape=(), dtype=tf.int32, trainable=False,
                initializer=tf.compat.v1.zeros_initializer(),
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
            self.locally_aggregated_grads = []
            for i, grad in enumerate(grads):
                if grad is None:
                    self.locally_aggregated_grads.append(None)
                    continue
                grad = self._dense(grad)
                self.locally_aggregated_grads.append(tf.compat.v1.get_variable(
                    str(i), shape=grad.shape, dtype=grad.dtype, trainable=False,
                    initializer=tf.compat.v1.zeros_initializer(),
                    collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                                 "aggregating_collection"]))
        if self.optimizer_type == self._OPTIMIZER_TYPE_KERAS:
            # tf_keras in a TF1 graph initializes the model's variables itself, not these.
            session = tf.compat.v1.keras.backend.get_session(op_input_list=())
            session.run(tf.compat.v1.variables_initializer(
                [self.counter] + [a for a in self.locally_aggregated_grads if a is not None]))

    def compute_gradients(self, grads, vars):
        """Adds `grads` to the sums; on every backward_passes_per_step-th call returns the sums
        reduced over the ranks (divided by the number of passes when
        average_aggregated_gradients), else `grads` themselves."""
        grads = list(grads)
        vars = list(vars)
        self._make_variables(grads)
        sums = self.locally_aggregated_grads
        present = [i for i, g in enumerate(grads) if g is not None]

        def clear():
            return tf.group(*[sums[i].assign(tf.zeros_like(sums[i])) for i in present])
        cleared = tf.cond(tf.equal(self.counter, 0), clear, tf.no_op)
        with tf.control_dependencies([cleared]):
            added = [sums[i].assign_add(self._dense(grads[i])) for i in present]
        with tf.control_dependencies(added):
            counted = self.counter.assign_add(1)

        def reduce():
            totals = [sums[i].read_value() for i in present]
            reduced = self._allreduce_grads(totals, [vars[i] for i in present])
            with tf.control_dependencies([r for r in reduced if r is not None]):
                reset = self.counter.assign(0)
            with tf.control_dependencies([reset]):
                divisor = self.backward_passes_per_step if self.average_aggregated_gradients \
                    else 1
                return [tf.divide(r, divisor) if divisor != 1 else tf.identity(r)
                        for r in reduced]

        def keep():
            return [tf.identity(self._dense(grads[i])) for i in present]
        with tf.control_dependencies([counted]):
            results = tf.cond(tf.equal(counted, self.backward_passes_per_step), reduce, keep)
        if not isinstance(results, (list, tuple)):
            results = [results]
        out = [None] * len(grads)
        for i, r in zip(present, results):
            out[i] = r
        return out

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Runs `apply_grads_closure` on the reducing pass (the counter is back at 0); on the
        others counts the optimizer's iterations (where it has them) and the global step."""
        grads_and_vars = args[0] if args else kwargs.get("grads_and_vars")
        tensors = [g.values if isinstance(g, tf.IndexedSlices) else g
                   for g, _ in grads_and_vars if g is not None]
        global_step = kwargs.get("global_step")

        def skip():
            iterations = getattr(optimizer, "iterations", None)
            steps = [] if iterations is None else [iterations.assign_add(1).op]
            if global_step is not None:
                steps.append(global_step.assign_add(1).op)
            return tf.group(*steps)
        with tf.control_dependencies([tf.group(*tensors)]):
            return tf.cond(tf.equal(self.counter, 0), lambda: tf.group(apply_grads_closure()),
                           skip)
