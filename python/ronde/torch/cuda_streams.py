"""CUDA tensors in ronde.torch requests: the stream they are produced on.

Horovod's torch frontend records a ready event on torch's current stream when a CUDA tensor is
submitted; ronde does the same in its core (``Request.stream``): the runtime's copies wait on
that event, not on the whole device, and when the handle completes the output is ready on that
stream (it waits, on the device, for the runtime's copies). Called only for CUDA tensors, so
CPU-only jobs never touch ``torch.cuda``.
"""

import torch

from ronde import _core


def _refuse_without_cuda(device):
    if not _core.cuda_built():
        raise _core.RondeError(
            "tensor on %s: this ronde was built without CUDA, so it takes CPU tensors only "
            "(reinstall it where nvcc is on PATH; see docs/gpu.md)" % device)


def stream_of(tensor):
    """torch's current stream on `tensor`'s device, as the integer cudaStream_t."""
    _refuse_without_cuda(tensor.device)
    return torch.cuda.current_stream(tensor.device).cuda_stream


def attach(request, tensor):
    """Sets `request`'s stream from `tensor` (a CUDA tensor); returns the request."""
    request.stream = stream_of(tensor)
    return request


def allocator_on_current_stream(device, allocate):
    """`allocate` wrapped to run as if on torch's current stream on `device` now (the caller's,
    at submission), though the runtime calls it on its own thread, whose current stream is the
    default one. torch's caching allocator ties a block to the stream it was allocated on and
    reuses it once that stream's later work allows: tied to the default stream, an output the
    caller uses on a side stream could be handed out again while that use is still queued."""
    _refuse_without_cuda(device)
    stream = torch.cuda.current_stream(device)

    def on_stream(shape):
        with torch.cuda.stream(stream):
            return allocate(shape)
    return on_stream
