"""Horovod's mxnet Compression (`none`, `fp16`): the casting compressors of
ronde.common.compression on NDArrays. No bf16: MXNet's CPU NDArrays have no bfloat16."""

import numpy as np

from ronde.common import compression as common


class MXNetOps(common.TensorOps):
    def dtype(self, tensor):
        return np.dtype(tensor.dtype)

    def is_floating(self, dtype):
        return np.issubdtype(dtype, np.floating)

    def wire_dtype(self, name):
        return np.dtype(name)

    def cast(self, tensor, dtype):
        return tensor.astype(dtype)


_OPS = MXNetOps()


class Compression:
    """Horovod's mxnet Compression: none, or fp16 on the wire for floating-point gradients."""

    none = common.NoneCompressor
    fp16 = common.cast_compressor(_OPS, "float16", "FP16Compressor")
