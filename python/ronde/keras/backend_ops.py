"""Gradient allreduce for whichever backend Keras 3 runs on; the rest of ronde.keras is
backend-neutral (keras.ops and numpy). Each backend's reduction lives here and nowhere else."""

import keras

from ronde.common import numpy_ops as nops


def _gradient_names(variables):
    return ["grad.%d.%s" % (i, getattr(v, "path", None) or v.name)
            for i, v in enumerate(variables)]


def allreduce_gradients(grads, variables, compression, sparse_as_dense, op, prescale,
                        postscale, process_set):
    """The gradients reduced over `process_set` (None stays None), as tensors of the backend.
    All are submitted before any is waited for, so the runtime fuses them."""
    backend = keras.backend.backend()
    names = _gradient_names(variables)
    if backend == "tensorflow":
        from ronde.tensorflow.gradient_tape import allreduce_gradients as tf_allreduce
        predivide = 1.0 / prescale if op == nops.Average else 1.0
        return tf_allreduce(grads, names, compression, sparse_as_dense, op, predivide,
                            process_set)
    if backend == "torch":
        from ronde.torch import mpi_ops
        if not process_set.included():
            return list(grads)
        started = []
        for grad, name in zip(grads, names):
            if grad is None:
                started.append(None)
                continue
            if grad.is_sparse:
                grad = grad.to_dense()
            compressed, ctx = compression.compress(grad)
            handle = mpi_ops.allreduce_async(compressed, name=name, op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=process_set)
            started.append((handle, ctx))
        return [None if s is None else compression.decompress(mpi_ops.synchronize(s[0]), s[1])
                for s in started]
    raise NotImplementedError(
        "ronde.keras.DistributedOptimizer supports the tensorflow and torch backends of "
        "Keras 3, not %r" % backend)
