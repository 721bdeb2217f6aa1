"""Horovod's gradient compression for TensorFlow (`Compression.none`, `fp16`, and `bf16`): the
casting compressors of ronde.common.compression on tf tensors."""

import tensorflow as tf

from ronde.common import compression as common

_WIRE = {"float16": tf.float16, "bfloat16": tf.bfloat16}


class TensorFlowOps(common.TensorOps):
    def dtype(self, tensor):
        return tensor.dtype

    def is_floating(self, dtype):
        return dtype.is_floating

    def wire_dtype(self, name):
        return _WIRE[name]

    def cast(self, tensor, dtype):
        return tf.cast(tensor, dtype)


_OPS = TensorFlowOps()
NoneCompressor = common.NoneCompressor
FP16Compressor = common.cast_compressor(_OPS, "float16", "FP16Compressor")
BF16Compressor = common.cast_compressor(_OPS, "bfloat16", "BF16Compressor")


class Compression:
    """Horovod's names, `Compression.none` and `Compression.fp16`, and `Compression.bf16`."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
