"""Horovod's Compression for Keras 3 on any backend: the casting compressors of
ronde.common.compression through keras.ops."""

import keras

from ronde.common import compression as common


class KerasOps(common.TensorOps):
    def dtype(self, tensor):
        return keras.backend.standardize_dtype(tensor.dtype)

    def is_floating(self, dtype):
        return "float" in dtype

    def wire_dtype(self, name):
        return name  # Keras names dtypes by string

    def cast(self, tensor, dtype):
        return keras.ops.cast(tensor, dtype)


_OPS = KerasOps()
NoneCompressor = common.NoneCompressor
FP16Compressor = common.cast_compressor(_OPS, "float16", "FP16Compressor")
BF16Compressor = common.cast_compressor(_OPS, "bfloat16", "BF16Compressor")


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
