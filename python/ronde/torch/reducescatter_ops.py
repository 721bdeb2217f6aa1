"""reducescatter and grouped_reducescatter on torch tensors (Horovod's signatures and
semantics), differentiable for Sum and Average."""

import torch

from ronde.torch.gather_ops import allgather, grouped_allgather
from ronde.torch.process_sets import global_process_set
from ronde.torch.submission import (_CORE_OP_CODES, _REDUCESCATTER, _REDUCESCATTER_CODE, Average,
                                    Sum, _Group, _allocator, _as_sequence, _check_op, _core,
                                    _enqueue, _member_names, _name, _output, _register, _spec,
                                    _submit_group, _submit_one, synchronize)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter: rank r gets its share of the first dimension of the reduction."""
    op = _check_op(op, None)
    handle = _submit_one(_REDUCESCATTER_CODE, tensor, name, _CORE_OP_CODES[op], prescale_factor,
                         postscale_factor, process_set)
    if handle is not None:
        return handle
    source = tensor.contiguous()
    core = _enqueue(_spec(_REDUCESCATTER, _name("reducescatter", name, process_set), source,
                               allocate=_allocator(source), op=op, prescale=prescale_factor,
                               postscale=postscale_factor, process_set=process_set))
    return _register(core, _output)


def _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor):
    """Horovod 0.28.1's factor on the allgathered output gradient (HorovodReducescatter's
    backward, and its TensorFlow gradient, as ronde.tensorflow.gradients has it): the set's
    size for Sum, 1 for Average, times both scale factors. That is size times the gradient of
    the sum over ranks of their losses; a script tuned on Horovod expects it. Horovod returns
    the same for Min, Max and Product, where it is no gradient; ronde refuses those."""
    if op not in (Sum, Average):
        raise NotImplementedError("reducescatter has a gradient for Sum and Average only")
    scale = prescale_factor * postscale_factor
    return scale * process_set.size() if op == Sum else scale


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.scale = (op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        # Every rank's input reaches every rank's share: the allgather of the shares'
        # gradients, scaled as Horovod scales it (_reducescatter_grad_scale).
        grad = allgather(grad_output, process_set=ctx.process_set)
        return grad * _reducescatter_grad_scale(*ctx.scale), None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks and returns this rank's share of the first dimension
    (the first ``rows % size`` ranks get one extra row); differentiable for Sum and Average."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, None)
    compressed, context = compression.compress(tensor)
    output = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                  postscale_factor)
    return compression.decompress(output, context)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    op = _check_op(op, None)
    tensors = _as_sequence(tensors)
    group_name = _name("grouped_reducescatter", name, process_set)
    handle = _submit_group(_REDUCESCATTER_CODE, tensors, None, group_name, _CORE_OP_CODES[op],
                           prescale_factor, postscale_factor, process_set)
    if handle is not None:
        return handle
    sources = [t.contiguous() for t in tensors]
    names = _member_names(group_name, len(tensors))
    specs = [_spec(_REDUCESCATTER, n, s, allocate=_allocator(s), op=op,
                   prescale=prescale_factor, postscale=postscale_factor,
                   process_set=process_set) for s, n in zip(sources, names)]
    group = _Group(_core.enqueue_group(specs))
    return _register(group, lambda h: [_output(c) for c in h.cores])


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.scale = (op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        scale = _reducescatter_grad_scale(*ctx.scale)
        grads = grouped_allgather(list(grad_outputs), process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(g * scale for g in grads)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one negotiated group; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, None)
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                          postscale_factor, *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


