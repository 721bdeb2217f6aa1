"""Horovod's local gradient aggregation for Keras 2 optimizers (backward_passes_per_step > 1):
each pass adds its gradients to local sums; every N-th pass reduces the sums over the ranks
(divided by N with average_aggregated_gradients) and applies them, and the other passes only
count the optimizer's iterations, as Horovod does.

The same code runs eagerly, in a tf.function (model.fit) and in a TF1 graph (get_updates), so
the order of its side effects is written as control dependencies: a TF1 graph adds none by
itself. Its variables are created outside any branch and not tracked by the optimizer (they
are not saved with it)."""

import tensorflow as tf


class GradientAccumulation:
    def __init__(self, passes, average, sparse_as_dense):
        self.passes = passes
        self.average = average
        self.sparse_as_dense = sparse_as_dense
        self.counter = None
        self.sums = {}

    def _make_variables(self, grads):
        created = []
        with tf.init_scope():
            if self.counter is None:
                self.counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="ronde_backward_passes")
                created.append(self.counter)
            for i, grad in enumerate(grads):
                if grad is not None and i not in self.sums:
                    self.sums[i] = tf.Variable(tf.zeros(grad.shape, grad.dtype), trainable=False,
                                               name="ronde_aggregated_gradient_%d" % i)
                    created.append(self.sums[i])
        if created and not tf.executing_eagerly() and not tf.inside_function():
            _initialize_in_keras_session(created)

    def compute_gradients(self, grads, reduce):
        """This pass's gradients added to the sums. Returns the sums, reduced by
        `reduce(list)` (and the sums cleared) on every N-th pass."""
        dense = []
        for grad in grads:
            if isinstance(grad, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError("IndexedSlices are not supported when "
                                     "`backward_passes_per_step` > 1 and `sparse_as_dense` is "
                                     "False.")
                grad = tf.convert_to_tensor(grad)
            dense.append(grad)
        self._make_variables(dense)
        adds = [self.sums[i].assign_add(g) for i, g in enumerate(dense) if g is not None]
        with tf.control_dependencies(adds):
            totals = [None if g is None else self.sums[i].read_value()
                      for i, g in enumerate(dense)]
            count = self.counter.assign_add(1)
        present = [t for t in totals if t is not None]

        def reduce_and_clear():
            reduced = reduce(totals)
            if self.average:
                reduced = [None if r is None else r / self.passes for r in reduced]
            outputs = [r for r in reduced if r is not None]
            with tf.control_dependencies(outputs):
                clears = [s.assign(tf.zeros_like(s)) for s in self.sums.values()]
                clears.append(self.counter.assign(0))
            with tf.control_dependencies(clears):
                return [tf.identity(r) for r in outputs]

        def keep():
            return [tf.identity(t) for t in present]

        with tf.control_dependencies([count] + present):
            is_update = tf.equal(self.counter.read_value(), self.passes)
        chosen = iter(tf.cond(is_update, reduce_and_clear, keep))
        return [None if t is None else next(chosen) for t in totals]

    def apply_gradients(self, grads, apply, count_iteration):
        """`apply()` when the last compute_gradients reduced (the counter is back at 0),
        else `count_iteration()`."""
        ready = [g for g in grads if g is not None]
        with tf.control_dependencies(ready):
            is_update = tf.equal(self.counter.read_value(), 0)

        def run(fn):
            def branch():
                result = fn()
                deps = [] if result is None else [_as_op(result)]
                with tf.control_dependencies(deps):
                    return tf.constant(True)
            return branch
        return tf.cond(is_update, run(apply), run(count_iteration))


def _as_op(result):
    if isinstance(result, tf.Variable):
        return result.read_value()
    return result


def _initialize_in_keras_session(variables):
    """TF1 graph mode: Keras runs the graph in its own session, which knows nothing of these
    variables, so they are initialized there now (as Horovod's MetricAverageCallback does)."""
    from ronde.tensorflow.keras.world import keras2_session
    keras2_session().run([v.initializer for v in variables])
