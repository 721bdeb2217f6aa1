"""ronde.common.compression is framework-neutral: the same top-k and PowerSGD code driven through
a numpy adapter gives what ronde.torch's adapter gives, step by step (state included). The
collectives of one rank are the identity, so no peer is needed."""

import numpy as np
import pytest
import torch

from ronde.common import compression as common
from ronde.torch.compression import TorchOps


class NumpyOps(common.TensorOps):
    def dtype(self, tensor):
        return tensor.dtype

    def is_floating(self, dtype):
        return np.issubdtype(dtype, np.floating)

    def wire_dtype(self, name):
        return np.dtype(name)

    def cast(self, tensor, dtype):
        return tensor.astype(dtype)

    def flat_copy(self, tensor):
        return tensor.reshape(-1).copy()

    def largest_magnitudes(self, flat, k):
        return np.argpartition(-np.abs(flat), k - 1)[:k]

    def index_array(self, indices, numel):
        return indices.astype(np.int32 if numel < 2**31 else np.int64)

    def scatter_add(self, numel, indices, values):
        out = np.zeros(numel, dtype=values.dtype)
        np.add.at(out, indices, values)
        return out

    def outer(self, a, b):
        return np.outer(a, b)

    def norm(self, vector):
        return np.linalg.norm(vector)

    def from_numpy(self, array, dtype):
        return array.astype(dtype)

    def nbytes(self, tensor):
        return tensor.nbytes


class OneRank(common.Collectives):
    def allreduce(self, tensor, name, average, process_set):
        return tensor

    def allgather(self, tensor, name, process_set):
        return tensor

    def wait(self, handle):
        return handle


class OneRankSet:
    def size(self):
        return 1


def run(compressor, gradients):
    return [compressor.reduce_async(g, "w", True, OneRankSet())() for g in gradients]


@pytest.mark.parametrize("make", [
    lambda ops: common.TopKCompressor(ops, OneRank(), ratio=0.05, min_elements=1),
    lambda ops: common.PowerSGDCompressor(ops, OneRank(), rank=3),
], ids=["topk", "powersgd"])
def test_numpy_and_torch_adapters_run_the_same_algorithm(make):
    rng = np.random.default_rng(5)
    gradients = [rng.standard_normal((40, 30)) for _ in range(4)]
    on_numpy = make(NumpyOps())
    on_torch = make(TorchOps())
    got_numpy = run(on_numpy, gradients)
    got_torch = run(on_torch, [torch.from_numpy(g.copy()) for g in gradients])
    for a, b in zip(got_numpy, got_torch):
        assert isinstance(a, np.ndarray) and isinstance(b, torch.Tensor)
        assert np.allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)
    assert on_numpy.bytes_sent == on_torch.bytes_sent > 0
    # Error feedback: what was sent plus what is kept is everything that came in.
    kept = on_numpy.state["w"]
    kept = kept if isinstance(kept, np.ndarray) else kept["error"]
    assert np.allclose(sum(got_numpy) + kept.reshape(40, 30), sum(gradients))


def test_casting_compressor_through_the_numpy_adapter():
    fp16 = common.cast_compressor(NumpyOps(), "float16", "FP16Compressor")
    x = np.linspace(-2, 2, 7)
    payload, ctx = fp16.compress(x)
    assert payload.dtype == np.float16 and ctx == np.float64
    assert np.allclose(fp16.decompress(payload, ctx), x, atol=1e-3)
    ints = np.arange(3)
    assert fp16.compress(ints) == (ints, None)
