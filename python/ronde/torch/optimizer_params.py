"""What both distributed optimizers (averaging and Adasum of deltas) check and hook alike."""


def checked_named_parameters(param_groups, named_parameters):
    """The (name, parameter) list of a distributed optimizer, as Horovod checks it: unique
    names covering every parameter; generated names when none are given."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%s.%s" % (i, j), v)
                            for i, group in enumerate(param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    duplicates = sorted({k for k in names if names.count(k) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         "Found duplicates: %s" % ", ".join(duplicates))
    all_ids = {id(v) for group in param_groups for v in group["params"]}
    named_ids = {id(v) for _, v in named_parameters}
    unnamed = all_ids - named_ids
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in sorted(unnamed)))
    return named_parameters


def register_gradient_hooks(optimizer):
    """Calls optimizer._make_hook(p)'s hook once each trainable parameter's gradient is
    accumulated; fills optimizer._requires_update and keeps the hooks in _grad_accs."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                optimizer._requires_update.add(p)
                hook = optimizer._make_hook(p)
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    optimizer._grad_accs.append(p.register_post_accumulate_grad_hook(hook))
                    continue
                # The accumulator node is reached through a view; keep it alive.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(hook)
                optimizer._grad_accs.append(accumulator)
