"""allreduce in Horovod's style: every op over every dtype it applies to, scaling, in-place,
async, grouped and fused requests. Expected values are computed from every rank's input."""

import itertools
import warnings

import torch

import ronde.torch as hvd
from horovod_case import (ALL_DTYPES, FLOAT_DTYPES, INTEGER_DTYPES, NUMERIC_DTYPES,
                          HorovodTestCase, averaging_input, rank_input)

SHAPES = [(), (5,), (3, 4), (2, 3, 2)]


def reference(op, inputs, dtype):
    """The reduction of every rank's input, computed in int64/float64 (bool: any/all)."""
    if dtype == torch.bool:
        stacked = torch.stack(inputs)
        if op in (hvd.Sum, hvd.Max):
            return stacked.any(0)
        return stacked.all(0)  # Min, Product
    wide = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64)
                        for t in inputs])
    if op == hvd.Sum:
        out = wide.sum(0)
    elif op == hvd.Min:
        out = wide.min(0).values
    elif op == hvd.Max:
        out = wide.max(0).values
    elif op == hvd.Product:
        out = wide.prod(0)
    else:
        raise AssertionError(op)
    return out.to(dtype)


class AllreduceTests(HorovodTestCase):
    def test_every_op_every_dtype(self):
        n, me = hvd.size(), hvd.rank()
        for op, dtype, shape in itertools.product(
                [hvd.Sum, hvd.Min, hvd.Max, hvd.Product], ALL_DTYPES, SHAPES):
            # Products of |x| <= 2 over 4 ranks stay within int8.
            low, high = (-2, 3) if op == hvd.Product else (-10, 10)
            inputs = [rank_input(r, shape, dtype, low, high, seed=op) for r in range(n)]
            out = hvd.allreduce(inputs[me], op=op)
            self.assertSame(out, reference(op, inputs, dtype), "op %s %s %s" % (op, dtype, shape))

    def test_average_every_numeric_dtype(self):
        n, me = hvd.size(), hvd.rank()
        for dtype, shape in itertools.product(NUMERIC_DTYPES, SHAPES):
            mine, average = averaging_input(me, n, shape, dtype)
            self.assertSame(hvd.allreduce(mine), average, "%s %s" % (dtype, shape))
            self.assertSame(hvd.allreduce(mine, op=hvd.Average), average)
        # An average that is not an integer: floats round once.
        for dtype in FLOAT_DTYPES:
            inputs = [rank_input(r, (7,), dtype) for r in range(n)]
            expected = (torch.stack([t.double() for t in inputs]).sum(0) / n).to(dtype)
            self.assertClose(hvd.allreduce(inputs[me], op=hvd.Average), expected, str(dtype))

    def test_average_of_bool_is_refused(self):
        with self.assertRaises(RuntimeError):
            hvd.allreduce(torch.tensor([True, False]), op=hvd.Average, name="bool.average")
        # ... and the runtime goes on.
        out = hvd.allreduce(torch.tensor([hvd.rank() == 0, True]), op=hvd.Min)
        self.assertEqual(out.tolist(), [hvd.size() == 1, True])

    def test_average_argument(self):
        # Horovod's deprecated `average=` still works, with a warning; with `op` it is an error.
        n = hvd.size()
        t = torch.full((3,), float(hvd.rank()))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            averaged = hvd.allreduce(t, average=True)
            summed = hvd.allreduce(t, average=False)
        self.assertTrue(any(issubclass(w.category, DeprecationWarning) for w in caught))
        self.assertClose(averaged, torch.full((3,), (n - 1) / 2.0))
        self.assertSame(summed, torch.full((3,), float(n * (n - 1) // 2)))
        with self.assertRaises(ValueError):
            hvd.allreduce(t, average=True, op=hvd.Sum)

    def test_prescale_and_postscale(self):
        n, me = hvd.size(), hvd.rank()
        for dtype, shape in itertools.product(NUMERIC_DTYPES, [(4,), (2, 3)]):
            inputs = [rank_input(r, shape, dtype, -5, 5) for r in range(n)]
            # Factors that keep every value exact: integers for integer dtypes.
            pre, post = (2.0, 3.0) if dtype in INTEGER_DTYPES else (0.5, 3.0)
            if dtype == torch.uint8:
                inputs = [rank_input(r, shape, dtype, 0, 5) for r in range(n)]
            expected = (reference(hvd.Sum, inputs, torch.float64) * pre * post).to(dtype)
            out = hvd.allreduce(inputs[me], op=hvd.Sum, prescale_factor=pre,
                                postscale_factor=post)
            self.assertSame(out, expected, str(dtype))
            if dtype in (torch.int8, torch.uint8):
                continue  # prescaled by 2 before the sum, 4 ranks' inputs would wrap
            mine, average = averaging_input(me, n, shape, dtype)
            out = hvd.allreduce(mine, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
            self.assertSame(out, average, "average " + str(dtype))
            mine_copy = mine.clone()
            hvd.allreduce_(mine_copy, op=hvd.Average, prescale_factor=2.0, postscale_factor=1.0)
            self.assertSame(mine_copy, (average.to(torch.float64) * 2).to(dtype))

    def test_input_is_not_modified(self):
        t = torch.arange(6, dtype=torch.float32) * (hvd.rank() + 1)
        before = t.clone()
        hvd.allreduce(t, op=hvd.Sum)
        self.assertSame(t, before)

    def test_in_place(self):
        n, me = hvd.size(), hvd.rank()
        for dtype in NUMERIC_DTYPES:
            inputs = [rank_input(r, (3, 5), dtype) for r in range(n)]
            t = inputs[me].clone()
            out = hvd.allreduce_(t, op=hvd.Sum)
            self.assertIs(out, t)
            self.assertSame(t, reference(hvd.Sum, inputs, dtype), str(dtype))

    def test_non_contiguous(self):
        n, me = hvd.size(), hvd.rank()
        inputs = [rank_input(r, (4, 6), torch.float32) for r in range(n)]
        expected = reference(hvd.Max, inputs, torch.float32)
        view = inputs[me].clone().t()  # a transposed view: not contiguous
        self.assertFalse(view.is_contiguous())
        self.assertSame(hvd.allreduce(view, op=hvd.Max), expected.t())
        out = hvd.allreduce_(view, op=hvd.Max)
        self.assertIs(out, view)
        self.assertSame(view, expected.t())

    def test_async_many_then_synchronize(self):
        n, me = hvd.size(), hvd.rank()
        cases = list(itertools.product([hvd.Sum, hvd.Max], [torch.int32, torch.float64], SHAPES))
        handles, expected = [], []
        for i, (op, dtype, shape) in enumerate(cases):
            inputs = [rank_input(r, shape, dtype, seed=i) for r in range(n)]
            handles.append(hvd.allreduce_async(inputs[me], op=op, name="async.%d" % i))
            expected.append(reference(op, inputs, dtype))
        # Synchronized in reverse order: each handle is its own request.
        for handle, want in reversed(list(zip(handles, expected))):
            self.assertSame(hvd.synchronize(handle), want)
        # poll on a handle becomes True without synchronize, and stays valid until then.
        h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="async.poll")
        while not hvd.poll(h):
            pass
        self.assertSame(hvd.synchronize(h), torch.full((2,), float(n)))

    def test_async_in_place(self):
        n, me = hvd.size(), hvd.rank()
        tensors = [rank_input(me, (i + 1,), torch.int64, seed=i) for i in range(8)]
        expected = [reference(hvd.Min, [rank_input(r, (i + 1,), torch.int64, seed=i)
                                        for r in range(n)], torch.int64) for i in range(8)]
        handles = [hvd.allreduce_async_(t, op=hvd.Min) for t in tensors]
        for t, h, want in zip(tensors, handles, expected):
            self.assertIs(hvd.synchronize(h), t)
            self.assertSame(t, want)

    def test_fused_many_tensors(self):
        # Many small requests of mixed dtypes and shapes in flight at once: the runtime fuses
        # those that agree and must give each its own result.
        n, me = hvd.size(), hvd.rank()
        handles, expected = [], []
        for i in range(96):
            dtype = NUMERIC_DTYPES[i % len(NUMERIC_DTYPES)]
            shape = [(1,), (17,), (3, 7), (2, 2, 5)][i % 4]
            inputs = [rank_input(r, shape, dtype, seed=100 + i) for r in range(n)]
            handles.append(hvd.allreduce_async(inputs[me], op=hvd.Sum, name="fused.%d" % i))
            expected.append(reference(hvd.Sum, inputs, dtype))
        for i, (h, want) in enumerate(zip(handles, expected)):
            self.assertSame(hvd.synchronize(h), want, "tensor %d" % i)

    def test_one_large_tensor(self):
        # One tensor larger than a fusion chunk: 1M floats.
        n, me = hvd.size(), hvd.rank()
        t = torch.arange(1 << 20, dtype=torch.float32) % 97 + me
        expected = (torch.arange(1 << 20, dtype=torch.float32) % 97) * n + n * (n - 1) // 2
        self.assertSame(hvd.allreduce(t, op=hvd.Sum), expected)

    def test_grouped(self):
        n, me = hvd.size(), hvd.rank()
        for op, dtype in itertools.product([hvd.Sum, hvd.Min, hvd.Max], NUMERIC_DTYPES):
            shapes = [(3,), (2, 4), (1,), (5, 1, 2)]
            inputs = [[rank_input(r, s, dtype, seed=i) for i, s in enumerate(shapes)]
                      for r in range(n)]
            expected = [reference(op, [inputs[r][i] for r in range(n)], dtype)
                        for i in range(len(shapes))]
            outs = hvd.grouped_allreduce(inputs[me], op=op)
            self.assertEqual(len(outs), len(shapes))
            for out, want in zip(outs, expected):
                self.assertSame(out, want, "%s %s" % (op, dtype))
            mine = [t.clone() for t in inputs[me]]
            hvd.grouped_allreduce_(mine, op=op)
            for out, want in zip(mine, expected):
                self.assertSame(out, want)
            handle = hvd.grouped_allreduce_async(inputs[me], op=op, name="grouped.async")
            for out, want in zip(hvd.synchronize(handle), expected):
                self.assertSame(out, want)

    def test_grouped_average_with_scaling(self):
        n, me = hvd.size(), hvd.rank()
        pairs = [averaging_input(me, n, (4,), torch.float32, seed=s) for s in range(3)]
        outs = hvd.grouped_allreduce([p[0] for p in pairs], op=hvd.Average,
                                     prescale_factor=0.5, postscale_factor=4.0)
        for out, (_, average) in zip(outs, pairs):
            self.assertSame(out, average * 2)

    def test_same_name_again(self):
        # A name may be reused once its previous request completed.
        for i in range(5):
            out = hvd.allreduce(torch.full((2,), float(i)), op=hvd.Sum, name="reused")
            self.assertSame(out, torch.full((2,), float(i * hvd.size())))

    def test_unsupported_dtype_and_op(self):
        # Refused before anything is submitted, on every rank alike (Horovod: ValueError).
        with self.assertRaises(ValueError):
            hvd.allreduce(torch.ones(2, dtype=torch.complex64))
        with self.assertRaises(ValueError):
            hvd.allreduce(torch.ones(2), op=17)
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
        self.assertSame(out, torch.full((2,), float(hvd.size())))

    def test_fp16_compression(self):
        # Compression.fp16 sends float32 as float16 and gives float32 back; small integers
        # survive exactly. Integer tensors are sent as they are.
        n, me = hvd.size(), hvd.rank()
        inputs = [rank_input(r, (6,), torch.float32) for r in range(n)]
        out = hvd.allreduce(inputs[me], op=hvd.Sum, compression=hvd.Compression.fp16)
        self.assertSame(out, reference(hvd.Sum, inputs, torch.float32))
        ints = [rank_input(r, (6,), torch.int32) for r in range(n)]
        out = hvd.allreduce(ints[me], op=hvd.Sum, compression=hvd.Compression.fp16)
        self.assertSame(out, reference(hvd.Sum, ints, torch.int32))

    def test_sparse(self):
        # sparse_allreduce_async: the coalesced sum of every rank's rows (Average: / size).
        n, me = hvd.size(), hvd.rank()
        dense = [torch.zeros(5, 2) for _ in range(n)]
        for r in range(n):
            dense[r][r % 5] = float(r + 1)
            dense[r][(r + 2) % 5] = 1.0
        for op in (hvd.Sum, hvd.Average):
            handle = hvd.sparse_allreduce_async(dense[me].to_sparse(), name="sparse.%d" % op,
                                                op=op)
            out = hvd.synchronize(handle)
            expected = sum(dense) / (n if op == hvd.Average else 1)
            self.assertClose(out.to_dense(), expected)
