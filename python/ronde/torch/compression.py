"""Gradient compression for ronde.torch (Horovod's Compression API, and more): the algorithms
of ronde.common.compression on torch tensors and ronde.torch's collectives.

none, fp16, bf16 (casting, stateless) work with every collective that takes `compression=`;
topk(...) and powersgd(...) make stateful compressors for one DistributedOptimizer.
"""

import torch

from ronde.common import compression as common
from ronde.common.compression import Compressor, casting, is_reducing  # noqa: F401 (API)

_WIRE = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class TorchOps(common.TensorOps):
    def dtype(self, tensor):
        return tensor.dtype

    def is_floating(self, dtype):
        return dtype.is_floating_point

    def wire_dtype(self, name):
        return _WIRE[name]

    def cast(self, tensor, dtype):
        return tensor.to(dtype)

    def flat_copy(self, tensor):
        return tensor.reshape(-1).clone()

    def largest_magnitudes(self, flat, k):
        return torch.topk(flat.abs(), k, sorted=False)[1]

    def index_array(self, indices, numel):
        return indices.to(torch.int32 if numel < 2**31 else torch.int64)

    def scatter_add(self, numel, indices, values):
        out = torch.zeros(numel, dtype=values.dtype, device=values.device)
        return out.index_add_(0, indices.long(), values)

    def outer(self, a, b):
        return torch.outer(a, b)

    def norm(self, vector):
        return vector.norm()

    def from_numpy(self, array, dtype):
        return torch.from_numpy(array).to(dtype)

    def nbytes(self, tensor):
        return tensor.numel() * tensor.element_size()


class TorchCollectives(common.Collectives):
    def allreduce(self, tensor, name, average, process_set):
        from ronde.torch.mpi_ops import Average, Sum, allreduce_async
        return allreduce_async(tensor, name=name, op=Average if average else Sum,
                               process_set=process_set)

    def allgather(self, tensor, name, process_set):
        from ronde.torch.mpi_ops import allgather_async
        return allgather_async(tensor, name, process_set)

    def wait(self, handle):
        from ronde.torch.mpi_ops import synchronize
        return synchronize(handle)


_OPS = TorchOps()
_COLLECTIVES = TorchCollectives()

NoneCompressor = common.NoneCompressor
FP16Compressor = common.cast_compressor(_OPS, "float16", "FP16Compressor")
BF16Compressor = common.cast_compressor(_OPS, "bfloat16", "BF16Compressor")


class TopKCompressor(common.TopKCompressor):
    __doc__ = common.TopKCompressor.__doc__

    def __init__(self, ratio=0.01, error_feedback=True, min_elements=1024):
        super().__init__(_OPS, _COLLECTIVES, ratio, error_feedback, min_elements)


class PowerSGDCompressor(common.PowerSGDCompressor):
    __doc__ = common.PowerSGDCompressor.__doc__

    def __init__(self, rank=4, error_feedback=True, warm_start=True, seed=0):
        super().__init__(_OPS, _COLLECTIVES, rank, error_feedback, warm_start, seed)


class Compression:
    """Horovod's Compression namespace, with bf16 and two reducing compressors.

    none, fp16, bf16: pass as `compression=` anywhere. topk(ratio) and powersgd(rank) make a
    fresh stateful compressor for one DistributedOptimizer (`compression=` there only)."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def topk(ratio=0.01, error_feedback=True, min_elements=1024):
        return TopKCompressor(ratio, error_feedback, min_elements)

    @staticmethod
    def powersgd(rank=4, error_feedback=True, warm_start=True, seed=0):
        return PowerSGDCompressor(rank, error_feedback, warm_start, seed)
