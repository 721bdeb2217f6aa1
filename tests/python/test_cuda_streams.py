"""ronde.torch's CUDA hook on a CPU machine: the request carries a stream, and a build without
CUDA refuses CUDA tensors with a message saying so (tests/gpu/ runs them on a GPU)."""
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
