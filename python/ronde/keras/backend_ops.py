"""Gradient allreduce for whichever backend Keras 3 runs on (tensorflow, torch, jax); the rest
of ronde.keras is backend-neutral (keras.ops and numpy). Each backend's reduction lives here
and nowhere else."""

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
    if backend == "jax":
        return _jax_allreduce(grads, names, compression, op, prescale, postscale, process_set)
    raise NotImplementedError(
        "ronde.keras.DistributedOptimizer supports the tensorflow, torch and jax backends of "
        "Keras 3, not %r" % backend)


def _jax_allreduce(grads, names, compression, op, prescale, postscale, process_set):
    """Under jax.jit (Keras 3's JAX trainer) gradients are tracers: one ordered io_callback
    hands them all to the host, submits them as one fused group and returns the reduced
    arrays. Ordered, so that JAX neither drops nor reorders a collective that every rank
    must call in the same order; eagerly the same callback simply runs."""
    import jax
    import numpy as np
    from jax.experimental import io_callback

    if not process_set.included():
        return list(grads)
    keep = [i for i, g in enumerate(grads) if g is not None]
    if not keep:
        return list(grads)
    compressed, contexts = [], []
    for i in keep:
        tensor, ctx = compression.compress(grads[i])
        compressed.append(tensor)
        contexts.append(ctx)
    shapes = tuple(jax.ShapeDtypeStruct(t.shape, t.dtype) for t in compressed)
    nops.check_initialized("DistributedOptimizer")
    group_names = [nops.request_name("allreduce", names[i], process_set) for i in keep]

    def reduce_on_host(*arrays):
        pending = nops.grouped_allreduce([np.asarray(a) for a in arrays], group_names, op=op,
                                         prescale_factor=prescale, postscale_factor=postscale,
                                         process_set=process_set)
        return tuple(pending.wait())

    reduced = io_callback(reduce_on_host, shapes, *compressed, ordered=True)
    out = list(grads)
    for i, tensor, ctx in zip(keep, reduced, contexts):
        out[i] = compression.decompress(tensor, ctx)
    return out
