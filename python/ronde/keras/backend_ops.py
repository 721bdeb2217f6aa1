"""Gradient reduction for whichever backend Keras 3 runs on: one small module per backend
(reduce_tensorflow, reduce_torch, reduce_jax), picked here and nowhere else."""

import keras


def _backend_module():
    backend = keras.backend.backend()
    if backend == "tensorflow":
        from ronde.keras import reduce_tensorflow as module
    elif backend == "torch":
        from ronde.keras import reduce_torch as module
    elif backend == "jax":
        from ronde.keras import reduce_jax as module
    else:
        raise NotImplementedError(
            "ronde.keras.DistributedOptimizer supports the tensorflow, torch and jax backends "
            "of Keras 3, not %r" % backend)
    return module


def gradient_names(variables, indices=None):
    """Request names that every rank derives alike: position and variable path."""
    indices = range(len(variables)) if indices is None else indices
    return ["grad.%d.%s" % (i, getattr(v, "path", None) or v.name)
            for i, v in zip(indices, variables)]


def allreduce_gradients(grads, names, options, plan=None):
    """The gradients reduced over options.process_set (None stays None), as tensors of the
    backend; see the backend's module for how."""
    return _backend_module().allreduce_gradients(grads, names, options, plan)


def divide(grad, size):
    return _backend_module().divide(grad, size)
