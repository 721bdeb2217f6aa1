"""ronde.torch's CUDA hook on a CPU machine: the request carries a stream, and a build without
CUDA refuses CUDA tensors with a message saying so (tests/gpu/ runs them on a GPU)."""
import contextlib
import threading

import pytest
import torch

from ronde import _core
from ronde.torch import cuda_streams


def test_a_request_carries_a_stream():
    request = _core.Request(_core.RequestKind.ALLREDUCE, "s")
    assert request.stream == 0
    request.stream = 0x7F00DEADBEEF
    assert request.stream == 0x7F00DEADBEEF


def test_cuda_tensors_without_a_cuda_build_are_refused_clearly(monkeypatch):
    monkeypatch.setattr(_core, "cuda_built", lambda: False)
    with pytest.raises(_core.RondeError, match="built without CUDA"):
        cuda_streams.stream_of(torch.zeros(1))


def test_outputs_are_allocated_as_if_on_the_callers_stream(monkeypatch):
    """The runtime calls the allocator on its own thread: the allocation must still happen under
    the stream current when the request was made (torch's caching allocator ties memory to it).
    torch.cuda's stream calls stand in for a GPU here; tests/gpu/torch_staging_check.py runs
    the real ones."""
    monkeypatch.setattr(_core, "cuda_built", lambda: True)
    callers = object()
    events = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: callers)

    @contextlib.contextmanager
    def on(stream):
        events.append(("enter", stream))
        yield
        events.append(("leave", stream))
    monkeypatch.setattr(torch.cuda, "stream", on)

    def allocate(shape):
        events.append(("allocate", shape))
        return shape
    wrapped = cuda_streams.allocator_on_current_stream("cuda:0", allocate)
    made = []
    thread = threading.Thread(target=lambda: made.append(wrapped([3, 4])))
    thread.start()
    thread.join()
    assert made == [[3, 4]]
    assert events == [("enter", callers), ("allocate", [3, 4]), ("leave", callers)]


def test_the_allocator_of_a_cuda_request_without_a_cuda_build_is_refused(monkeypatch):
    monkeypatch.setattr(_core, "cuda_built", lambda: False)
    with pytest.raises(_core.RondeError, match="built without CUDA"):
        cuda_streams.allocator_on_current_stream("cuda:0", lambda shape: None)
