"""Gradient reduction for Keras 3's torch backend, through ronde.torch's asynchronous ops."""


def allreduce_gradients(grads, names, options, plan=None):
    """`grads` (None stays None) reduced over options.process_set; every request is submitted
    before any is waited for. plan None: one request per gradient; else one grouped allreduce
    per list of indices."""
    from ronde.torch import mpi_ops

    process_set = options.process_set
    if not process_set.included():
        return list(grads)
    compression = options.compression
    groups = plan if plan is not None else [[i] for i, g in enumerate(grads) if g is not None]
    started = []
    for number, group in enumerate(groups):
        payloads, contexts = [], []
        for i in group:
            grad = grads[i].to_dense() if grads[i].is_sparse else grads[i]
            payload, ctx = compression.compress(grad)
            payloads.append(payload)
            contexts.append(ctx)
        if plan is None:
            handle = mpi_ops.allreduce_async(payloads[0], name=names[group[0]], op=options.op,
                                             prescale_factor=options.prescale,
                                             postscale_factor=options.postscale,
                                             process_set=process_set)
        else:
            handle = mpi_ops.grouped_allreduce_async(
                payloads, name="group%d.%s" % (number, names[group[0]]), op=options.op,
                prescale_factor=options.prescale, postscale_factor=options.postscale,
                process_set=process_set)
        started.append((group, handle, contexts))
    out = list(grads)
    for group, handle, contexts in started:
        results = mpi_ops.synchronize(handle)
        if plan is None:
            results = [results]
        for i, result, ctx in zip(group, results, contexts):
            out[i] = compression.decompress(result, ctx)
    return out


def divide(grad, size):
    return grad / size
