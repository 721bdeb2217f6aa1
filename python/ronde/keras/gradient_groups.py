"""Horovod's explicit gradient groups: which gradients are reduced together as one negotiated,
fused group. Framework-neutral: it sees gradients only as present (not None) or absent."""


def even_chunks(items, count):
    """`items` split into `count` contiguous chunks whose lengths differ by at most one (the
    longer ones first), empty chunks dropped."""
    size, extra = divmod(len(items), count)
    chunks = [items[k * size + min(k, extra):(k + 1) * size + min(k + 1, extra)]
              for k in range(count)]
    return [c for c in chunks if c]


def plan(grads, variables, groups):
    """The groups as lists of indices into `grads`, or None when every gradient goes alone.

    `groups` an integer: the present gradients in that many even chunks, in order. A list of
    lists of variables: each inner list's variables (those with a gradient here) form one
    group, in the order given; every other present gradient is a group of its own. Variables
    are matched by identity."""
    if groups is None:
        return None
    present = [i for i, g in enumerate(grads) if g is not None]
    if not isinstance(groups, list):
        return even_chunks(present, int(groups))
    unplaced = {id(variables[i]): i for i in present}
    result = []
    for group in groups:
        members = [unplaced.pop(id(v)) for v in group if id(v) in unplaced]
        if members:
            result.append(members)
    result.extend([i] for i in present if id(variables[i]) in unplaced)
    return result
