"""What every file of this suite shares: the Horovod-style TestCase, the dtypes ronde supports,
and per-rank inputs that any rank can rebuild for any other rank, so that an expected value is
computed here, independently of ronde, from every rank's known input."""

import unittest

import torch

import ronde.torch as hvd

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMERIC_DTYPES = INTEGER_DTYPES + FLOAT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + [torch.bool]


class HorovodTestCase(unittest.TestCase):
    """Horovod's pattern: each test init()s, and its tearDown meets the others in a barrier and
    shuts down, so that the next test starts a fresh runtime."""

    def setUp(self):
        hvd.init()

    def tearDown(self):
        hvd.barrier()
        hvd.shutdown()

    def assertSame(self, actual, expected, msg=None):
        """Equal dtype, shape and values (exact)."""
        self.assertEqual(actual.dtype, expected.dtype, msg)
        self.assertEqual(tuple(actual.shape), tuple(expected.shape), msg)
        self.assertTrue(torch.equal(actual, expected),
                        "%s\nactual   %s\nexpected %s" % (msg or "", actual, expected))

    def assertClose(self, actual, expected, msg=None):
        """Same dtype and shape; values within the dtype's rounding of one final operation."""
        self.assertEqual(actual.dtype, expected.dtype, msg)
        self.assertEqual(tuple(actual.shape), tuple(expected.shape), msg)
        rtol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6,
                torch.float64: 1e-12}.get(expected.dtype, 0.0)
        self.assertTrue(torch.allclose(actual.double(), expected.double(), rtol=rtol, atol=0.0),
                        "%s\nactual   %s\nexpected %s" % (msg or "", actual, expected))


def rank_input(rank, shape, dtype, low=-10, high=10, seed=0):
    """Rank `rank`'s input: small integers in [low, high) (as `dtype`), the same on every rank
    that asks. Integers keep every Sum/Min/Max/Product exact in every dtype (bfloat16 holds
    integers up to 256 exactly), so expected values compare exactly."""
    if dtype == torch.uint8 or dtype == torch.bool:
        low = max(low, 0)
    g = torch.Generator().manual_seed(1000003 * seed + 7919 * rank + 17)
    values = torch.randint(low, high, tuple(shape), generator=g, dtype=torch.int64)
    if dtype == torch.bool:
        return values % 2 == 1
    return values.to(dtype)


def averaging_input(rank, size, shape, dtype, seed=0):
    """Inputs whose average over `size` ranks is an integer: c + k * (2 * rank - (size - 1)),
    whose deviations add up to 0 over the ranks; returns (input, the average c). The sum over
    4 ranks stays below 128: integer sums wrap in their own dtype, as in Horovod."""
    g = torch.Generator().manual_seed(31 * seed + 5)
    c = torch.randint(10, 30, tuple(shape), generator=g, dtype=torch.int64)
    k = torch.randint(0, 2, tuple(shape), generator=g, dtype=torch.int64)
    return (c + k * (2 * rank - (size - 1))).to(dtype), c.to(dtype)
