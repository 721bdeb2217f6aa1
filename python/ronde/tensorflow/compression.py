"""Horovod's gradient compression for TensorFlow: `Compression.none` and `Compression.fp16`."""

import tensorflow as tf


class NoneCompressor:
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor:
    """Sends floating-point tensors as float16 and casts the result back to their dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Horovod's names: `Compression.none`, `Compression.fp16`."""

    none = NoneCompressor
    fp16 = FP16Compressor
