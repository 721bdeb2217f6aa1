"""Gradient reduction for Keras 3's jax backend. Under jax.jit (Keras 3's JAX trainer)
gradients are tracers: one ordered io_callback hands them all to the host, where they are
submitted through ronde's numpy ops and the reduced arrays come back. Ordered, so that JAX
neither drops nor reorders a collective that every rank must call in the same order; eagerly
the same callback simply runs."""

from ronde.common import numpy_ops as nops


def allreduce_gradients(grads, names, options, plan=None):
    """`grads` (None stays None) reduced over options.process_set. plan None: all of them as
    one fused group; else one group per list of indices."""
    import jax
    import numpy as np
    from jax.experimental import io_callback

    process_set = options.process_set
    if not process_set.included():
        return list(grads)
    keep = [i for i, g in enumerate(grads) if g is not None]
    if not keep:
        return list(grads)
    groups = plan if plan is not None else [keep]
    position = {i: k for k, i in enumerate(keep)}
    compressed, contexts = [], []
    for i in keep:
        tensor, ctx = options.compression.compress(grads[i])
        compressed.append(tensor)
        contexts.append(ctx)
    shapes = tuple(jax.ShapeDtypeStruct(t.shape, t.dtype) for t in compressed)
    nops.check_initialized("DistributedOptimizer")
    group_names = [[nops.request_name("allreduce", names[i], process_set) for i in group]
                   for group in groups]

    def reduce_on_host(*arrays):
        pending = [nops.grouped_allreduce([np.asarray(arrays[position[i]]) for i in group],
                                          group_name, op=options.op,
                                          prescale_factor=options.prescale,
                                          postscale_factor=options.postscale,
                                          process_set=process_set)
                   for group, group_name in zip(groups, group_names)]
        results = [None] * len(arrays)
        for group, p in zip(groups, pending):
            for i, array in zip(group, p.wait()):
                results[position[i]] = array
        return tuple(results)

    reduced = io_callback(reduce_on_host, shapes, *compressed, ordered=True)
    out = list(grads)
    for i, tensor, ctx in zip(keep, reduced, contexts):
        out[i] = options.compression.decompress(tensor, ctx)
    return out


def divide(grad, size):
    return grad / size
