"""Horovod's Compression for Keras 3 on any backend (keras.ops casts)."""

import keras


class NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor:
    """Sends floating-point gradients as float16; the result is cast back to their dtype."""

    @staticmethod
    def compress(tensor):
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if "float" in dtype and dtype != "float16":
            return keras.ops.cast(tensor, "float16"), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else keras.ops.cast(tensor, ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
