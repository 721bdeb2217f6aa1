"""allreduce and grouped_allreduce on torch tensors (Horovod's signatures and semantics).

allreduce_async_ is every gradient hook's call: for a contiguous tensor it is one C++ call
(ronde._core.HandleTable.allreduce_), which reads the tensor's address, dtype, shape and
device, names the request and registers its handle; a non-contiguous tensor is reduced
through a contiguous copy and copied back by synchronize.
"""

import torch

from ronde.torch import cuda_streams
from ronde.torch.process_sets import global_process_set
from ronde.torch.submission import (_ALLREDUCE, _ALLREDUCE_CODE, _CORE_OP_CODES, _CORE_OPS,
                                    _DTYPES, Average, _Group, _Request, _allreduce_in_place,
                                    _as_sequence, _check_op, _check_readable, _core, _enqueue,
                                    _enqueue_allreduce_, _member_names, _name, _ref, _register,
                                    _spec, _submit_group, _writable, synchronize)

_AVERAGE_CODE = _CORE_OP_CODES[Average]


def _allreduce_spec(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    return _spec(_ALLREDUCE, name, tensor, output, op=op, prescale=prescale_factor,
                 postscale=postscale_factor, process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an out-of-place allreduce; synchronize(handle) returns the reduced tensor."""
    op = _check_op(op, average)
    _check_readable(tensor)
    source = tensor.contiguous()
    output = torch.empty_like(source)
    request = _Request(_ALLREDUCE, _name("allreduce", name, process_set), _ref(source),
                       _ref(output), _CORE_OPS[op], prescale_factor, postscale_factor,
                       process_set.process_set_id)
    if source.is_cuda:
        cuda_streams.attach(request, source)
    return _register(_enqueue(request), None, output)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce; synchronize(handle) returns `tensor`."""
    if op is None and average is None:
        code = _AVERAGE_CODE
    else:
        code = _CORE_OP_CODES[_check_op(op, average)]
    handle = _allreduce_in_place(tensor, name, code, prescale_factor, postscale_factor,
                                 process_set)
    if handle is not None:
        return handle
    if tensor.is_cuda:  # the typed request, which carries torch's current stream
        return _cuda_allreduce_async_(tensor, name, _check_op(op, average), prescale_factor,
                                      postscale_factor, process_set)
    return _staged_allreduce_async_(tensor, name, code, prescale_factor, postscale_factor,
                                    process_set)


def _cuda_allreduce_async_(tensor, name, op, prescale_factor, postscale_factor, process_set):
    if tensor.is_contiguous():
        target, finish = tensor, None
    else:
        target, copy_back = _writable(tensor)
        finish = lambda h: copy_back(target)  # noqa: E731
    core = _enqueue(_allreduce_spec(target, target, _name("allreduce", name, process_set), op,
                                    prescale_factor, postscale_factor, process_set))
    return _register(core, finish, target)


def _staged_allreduce_async_(tensor, name, code, prescale_factor, postscale_factor,
                             process_set):
    """allreduce_async_ of a non-contiguous tensor: a contiguous copy is reduced and copied
    back into `tensor` by synchronize."""
    _check_readable(tensor)
    target, copy_back = _writable(tensor)
    dtype_code = _DTYPES.get(target.dtype)
    if dtype_code is None:
        raise ValueError("ronde does not support tensors of dtype %s" % target.dtype)
    core = _enqueue_allreduce_(target, target.data_ptr(), dtype_code, target.shape,
                               target.get_device() if target.is_cuda else -1,
                               _name("allreduce", name, process_set), code, prescale_factor,
                               postscale_factor, process_set.process_set_id)
    return _register(core, lambda h: copy_back(target), target)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks and returns the result; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, average)
    compressed, context = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(reduced, context)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place over all ranks and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))



def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _check_op(op, average)
    tensors = _as_sequence(tensors)
    group_name = _name("grouped_allreduce", name, process_set)
    try:
        outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    except RuntimeError:  # torch's words for a sparse tensor: say ronde's
        for t in tensors:
            _check_readable(t)
        raise
    handle = _submit_group(_ALLREDUCE_CODE, tensors, outputs, group_name, _CORE_OP_CODES[op],
                           prescale_factor, postscale_factor, process_set)
    if handle is not None:
        return handle
    sources = [t.contiguous() for t in tensors]
    names = _member_names(group_name, len(tensors))
    specs = [_allreduce_spec(s, o, n, op, prescale_factor, postscale_factor, process_set)
             for s, o, n in zip(sources, outputs, names)]
    cores = _core.enqueue_group(specs)
    return _register(_Group(cores), lambda h: outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _check_op(op, average)
    tensors = _as_sequence(tensors)
    group_name = _name("grouped_allreduce", name, process_set)
    handle = _submit_group(_ALLREDUCE_CODE, tensors, None, group_name, _CORE_OP_CODES[op],
                           prescale_factor, postscale_factor, process_set)
    if handle is not None:
        return handle
    staged = [_writable(t) for t in tensors]
    names = _member_names(group_name, len(tensors))
    specs = [_allreduce_spec(t, t, n, op, prescale_factor, postscale_factor, process_set)
             for (t, _), n in zip(staged, names)]
    cores = _core.enqueue_group(specs)
    return _register(_Group(cores), lambda h: [finish(t) for t, finish in staged])


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors as one negotiated, fused group; differentiable."""
    from ronde.torch.compression import casting
    compression = casting(compression)
    op = _check_op(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


