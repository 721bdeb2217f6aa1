"""Horovod's worker-local variables (`register_local_var`, PartialDistributedOptimizer's
`local_layers`): their gradients are not reduced; with scale_local_gradients they are divided
by the process set's size, as Horovod does (horovod#3695), so that a local gradient has the
scale an averaged one would have. Framework-neutral: the caller passes the reduction and the
division."""


class LocalVariables:
    """Variables registered as local, by identity (the objects the optimizer is handed)."""

    def __init__(self):
        self._by_id = {}

    def add(self, variable):
        self._by_id[id(variable)] = variable

    def __contains__(self, variable):
        return id(variable) in self._by_id

    def __len__(self):
        return len(self._by_id)


def reduce_shared(grads, variables, local, scale_local, size, reduce, divide):
    """`grads` with every present gradient of a shared variable replaced by
    `reduce(grads, variables, indices)`'s result (the indices are those into `grads`), and,
    when `scale_local` and any variable is registered local, each local gradient divided by
    `size` with `divide(grad, size)`."""
    grads = list(grads)
    shared = [i for i, g in enumerate(grads) if g is not None and variables[i] not in local]
    out = list(grads)
    if shared:
        reduced = reduce([grads[i] for i in shared], [variables[i] for i in shared], shared)
        for i, r in zip(shared, reduced):
            out[i] = r
    if scale_local and len(local):
        for i, g in enumerate(grads):
            if g is not None and variables[i] in local:
                out[i] = divide(g, size)
    return out
