"""Gradient reduction on TensorFlow tensors: Keras 3's tensorflow backend and Keras 2 (tf_keras)
share it. Eager or inside a tf.function or a TF1 graph, through ronde.tensorflow's ops."""

import tensorflow as tf


def allreduce_gradients(grads, names, options, plan=None):
    """`grads` (None stays None) reduced over options.process_set.

    plan None: one request per gradient, every one submitted before any is waited for
    (ronde.tensorflow's DistributedGradientTape path). A plan (lists of indices): each list
    is one grouped allreduce, negotiated and fused together; IndexedSlices kept sparse are
    reduced alone (allgathered), as Horovod does."""
    import ronde.tensorflow as rtf
    from ronde.tensorflow.gradient_tape import allreduce_gradients as tape_allreduce

    scope = (options.name or "DistributedOptimizer") + "_Allreduce"
    with tf.name_scope(scope):
        if plan is None:
            return tape_allreduce(list(grads), list(names), compression=options.compression,
                                  sparse_as_dense=options.sparse_as_dense, op=options.op,
                                  gradient_predivide_factor=options.predivide,
                                  process_set=options.process_set)
        if not options.process_set.included():
            return list(grads)
        out = list(grads)
        for number, group in enumerate(plan):
            dense = []
            for i in group:
                grad = grads[i]
                if isinstance(grad, tf.IndexedSlices):
                    if not options.sparse_as_dense:
                        out[i] = rtf.allreduce(grad, op=options.op, name=names[i],
                                               process_set=options.process_set)
                        continue
                    grad = tf.convert_to_tensor(grad)
                dense.append((i, grad))
            if not dense:
                continue
            reduced = rtf.grouped_allreduce(
                [g for _, g in dense], compression=options.compression, op=options.op,
                prescale_factor=options.prescale, postscale_factor=options.postscale,
                process_set=options.process_set, name="group%d.%s" % (number, names[dense[0][0]]))
            for (i, _), r in zip(dense, reduced):
                out[i] = r
        return out


def divide(grad, size):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(size, grad.dtype)
