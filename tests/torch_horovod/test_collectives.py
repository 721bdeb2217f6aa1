"""allgather, broadcast, alltoall, reducescatter and barrier in Horovod's style, over every
dtype ronde supports. Expected values are built from every rank's known input."""

import itertools

import torch

import ronde.torch as hvd
from horovod_case import (ALL_DTYPES, NUMERIC_DTYPES, HorovodTestCase, averaging_input,
                          rank_input)


def rows_of(rank):
    """Rank r's first dimension in the uneven tests: 0 for rank 1 (an empty share)."""
    return [2, 0, 3, 1][rank % 4]


def alltoall_splits(sender, size, seed=0):
    """How many rows `sender` sends to each rank; some are 0."""
    g = torch.Generator().manual_seed(97 * seed + sender)
    return torch.randint(0, 3, (size,), generator=g).tolist()


class AllgatherTests(HorovodTestCase):
    def test_variable_first_dimension_every_dtype(self):
        n, me = hvd.size(), hvd.rank()
        for dtype, tail in itertools.product(ALL_DTYPES, [(), (3,), (2, 2)]):
            inputs = [rank_input(r, (rows_of(r),) + tail, dtype) for r in range(n)]
            out = hvd.allgather(inputs[me])
            self.assertSame(out, torch.cat(inputs), "%s %s" % (dtype, tail))

    def test_same_shape_and_async(self):
        n, me = hvd.size(), hvd.rank()
        handles = []
        for i, dtype in enumerate(NUMERIC_DTYPES):
            inputs = [rank_input(r, (2, 3), dtype, seed=i) for r in range(n)]
            handles.append((hvd.allgather_async(inputs[me], name="ag.%d" % i), torch.cat(inputs)))
        for handle, expected in handles:
            self.assertSame(hvd.synchronize(handle), expected)

    def test_scalar_rows(self):
        # A 0-dimensional tensor is gathered as one row each (Horovod: shape [size]).
        out = hvd.allgather(torch.tensor(float(hvd.rank())))
        self.assertSame(out, torch.arange(hvd.size(), dtype=torch.float32))

    def test_grouped(self):
        n, me = hvd.size(), hvd.rank()
        for dtype in (torch.int16, torch.float32, torch.bool):
            inputs = [[rank_input(r, (rows_of(r) + i, 2), dtype, seed=i) for i in range(3)]
                      for r in range(n)]
            outs = hvd.grouped_allgather(inputs[me])
            self.assertEqual(len(outs), 3)
            for i, out in enumerate(outs):
                self.assertSame(out, torch.cat([inputs[r][i] for r in range(n)]), str(dtype))
            handle = hvd.grouped_allgather_async(inputs[me], name="grouped.ag")
            for i, out in enumerate(hvd.synchronize(handle)):
                self.assertSame(out, torch.cat([inputs[r][i] for r in range(n)]))

    def test_objects(self):
        n, me = hvd.size(), hvd.rank()
        got = hvd.allgather_object({"rank": me, "payload": list(range(me))})
        self.assertEqual(got, [{"rank": r, "payload": list(range(r))} for r in range(n)])


class BroadcastTests(HorovodTestCase):
    def test_every_root_every_dtype(self):
        n, me = hvd.size(), hvd.rank()
        for root, dtype, shape in itertools.product(range(n), ALL_DTYPES, [(), (4,), (2, 3, 2)]):
            inputs = [rank_input(r, shape, dtype) for r in range(n)]
            mine = inputs[me].clone()
            out = hvd.broadcast(mine, root)
            self.assertSame(out, inputs[root], "root %d %s" % (root, dtype))
            self.assertSame(mine, inputs[me])  # out of place: the input is left as it was

    def test_in_place_every_root(self):
        n, me = hvd.size(), hvd.rank()
        for root, dtype in itertools.product(range(n), NUMERIC_DTYPES):
            inputs = [rank_input(r, (3, 2), dtype, seed=root) for r in range(n)]
            mine = inputs[me].clone()
            self.assertIs(hvd.broadcast_(mine, root), mine)
            self.assertSame(mine, inputs[root])
            view = inputs[me].clone().t()  # non-contiguous: written back into the view
            hvd.broadcast_(view, root)
            self.assertSame(view, inputs[root].t())

    def test_async(self):
        n, me = hvd.size(), hvd.rank()
        inputs = [[rank_input(r, (5,), torch.float32, seed=root) for r in range(n)]
                  for root in range(n)]
        handles = [hvd.broadcast_async(inputs[root][me], root, name="bc.%d" % root)
                   for root in range(n)]
        mine = [inputs[root][me].clone() for root in range(n)]
        handles_ = [hvd.broadcast_async_(mine[root], root, name="bc_.%d" % root)
                    for root in range(n)]
        for root in range(n):
            self.assertSame(hvd.synchronize(handles[root]), inputs[root][root])
            hvd.synchronize(handles_[root])
            self.assertSame(mine[root], inputs[root][root])

    def test_objects(self):
        for root in range(hvd.size()):
            obj = {"from": hvd.rank(), "list": [hvd.rank()] * 3} if hvd.rank() == root else None
            got = hvd.broadcast_object(obj, root_rank=root)
            self.assertEqual(got, {"from": root, "list": [root] * 3})

    def test_parameters_and_optimizer_state(self):
        torch.manual_seed(hvd.rank())
        model = torch.nn.Linear(4, 2)
        root_state = None
        if hvd.rank() == 0:
            root_state = {k: v.clone() for k, v in model.state_dict().items()}
        root_state = hvd.broadcast_object(root_state, root_rank=0)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for k, v in model.state_dict().items():
            self.assertSame(v, root_state[k], k)
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.assertEqual(opt.param_groups[0]["lr"], 0.1)


class AlltoallTests(HorovodTestCase):
    def test_splits_every_dtype(self):
        n, me = hvd.size(), hvd.rank()
        splits = [alltoall_splits(r, n) for r in range(n)]
        for dtype, tail in itertools.product(ALL_DTYPES, [(), (2,), (2, 3)]):
            # Sender s's rows carry (s, destination, index) encoded in the values.
            def rows(s):
                parts = [rank_input(s * n + d, (splits[s][d],) + tail, dtype, 0, 100)
                         for d in range(n)]
                return parts
            mine = torch.cat(rows(me))
            for as_tensor in (False, True):
                given = torch.tensor(splits[me], dtype=torch.int32) if as_tensor else splits[me]
                out, received = hvd.alltoall(mine, splits=given)
                expected = torch.cat([rows(s)[me] for s in range(n)])
                self.assertSame(out, expected, "%s %s" % (dtype, tail))
                self.assertEqual(received.tolist(), [splits[s][me] for s in range(n)])

    def test_even_without_splits(self):
        n, me = hvd.size(), hvd.rank()
        mine = torch.arange(2 * n, dtype=torch.int64) + 100 * me
        out = hvd.alltoall(mine)
        expected = torch.tensor([100 * s + 2 * me + i for s in range(n) for i in range(2)])
        self.assertSame(out, expected)

    def test_empty(self):
        n = hvd.size()
        out, received = hvd.alltoall(torch.ones(0, 3), splits=[0] * n)
        self.assertEqual(tuple(out.shape), (0, 3))
        self.assertEqual(received.tolist(), [0] * n)

    def test_uneven_one_sender(self):
        # Only rank 0 sends anything: everyone else receives rows from rank 0 alone.
        n, me = hvd.size(), hvd.rank()
        if me == 0:
            mine, splits = torch.arange(n * (n + 1) // 2, dtype=torch.float64), list(range(1, n + 1))
        else:
            mine, splits = torch.zeros(0, dtype=torch.float64), [0] * n
        out, received = hvd.alltoall(mine, splits=splits)
        start = me * (me + 1) // 2
        self.assertSame(out, torch.arange(start, start + me + 1, dtype=torch.float64))
        self.assertEqual(received.tolist(), [me + 1] + [0] * (n - 1))

    def test_async(self):
        n, me = hvd.size(), hvd.rank()
        handle = hvd.alltoall_async(torch.full((n,), float(me)), splits=[1] * n, name="a2a")
        out, received = hvd.synchronize(handle)
        self.assertSame(out, torch.arange(n, dtype=torch.float32))
        self.assertEqual(received.tolist(), [1] * n)


class ReducescatterTests(HorovodTestCase):
    def _share(self, full, n, me):
        """Rank me's rows of `full`: the first rows % n ranks get one extra row."""
        base, extra = divmod(full.shape[0], n)
        start = me * base + min(me, extra)
        return full[start:start + base + (1 if me < extra else 0)]

    def test_ops_every_dtype(self):
        from test_allreduce import reference
        n, me = hvd.size(), hvd.rank()
        for op, dtype, rows in itertools.product(
                [hvd.Sum, hvd.Min, hvd.Max, hvd.Product], NUMERIC_DTYPES, [n, 2 * n + 1, 5]):
            low, high = (-2, 3) if op == hvd.Product else (-10, 10)
            inputs = [rank_input(r, (rows, 3), dtype, low, high, seed=op) for r in range(n)]
            out = hvd.reducescatter(inputs[me], op=op)
            expected = self._share(reference(op, inputs, dtype), n, me)
            self.assertSame(out, expected, "%s %s rows %d" % (op, dtype, rows))

    def test_average(self):
        n, me = hvd.size(), hvd.rank()
        for dtype in NUMERIC_DTYPES:
            mine, average = averaging_input(me, n, (2 * n + 1, 2), dtype)
            self.assertSame(hvd.reducescatter(mine), self._share(average, n, me), str(dtype))
            self.assertSame(hvd.reducescatter(mine, op=hvd.Average), self._share(average, n, me))

    def test_prescale_and_postscale(self):
        n, me = hvd.size(), hvd.rank()
        inputs = [rank_input(r, (n + 2, 2), torch.float32) for r in range(n)]
        total = torch.stack(inputs).sum(0)
        out = hvd.reducescatter(inputs[me], op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
        self.assertSame(out, self._share(total * 1.5, n, me))

    def test_grouped_and_async(self):
        n, me = hvd.size(), hvd.rank()
        shapes = [(n, 2), (2 * n + 1,), (3, 1, 2)]
        inputs = [[rank_input(r, s, torch.int32, seed=i) for i, s in enumerate(shapes)]
                  for r in range(n)]
        expected = [self._share(sum(inputs[r][i] for r in range(n)), n, me)
                    for i in range(len(shapes))]
        outs = hvd.grouped_reducescatter(inputs[me], op=hvd.Sum)
        for out, want in zip(outs, expected):
            self.assertSame(out, want)
        handle = hvd.grouped_reducescatter_async(inputs[me], op=hvd.Sum, name="grs")
        for out, want in zip(hvd.synchronize(handle), expected):
            self.assertSame(out, want)
        handle = hvd.reducescatter_async(inputs[me][1], op=hvd.Sum, name="rs")
        self.assertSame(hvd.synchronize(handle), expected[1])

    def test_fewer_rows_than_ranks(self):
        # One row over n ranks: rank 0 gets it, the others get an empty share.
        n, me = hvd.size(), hvd.rank()
        out = hvd.reducescatter(torch.full((1, 2), float(me)), op=hvd.Sum)
        expected = torch.full((1 if me == 0 else 0, 2), float(n * (n - 1) // 2))
        self.assertSame(out, expected)


class BarrierTests(HorovodTestCase):
    def test_barriers_between_collectives(self):
        for i in range(10):
            hvd.barrier()
            out = hvd.allreduce(torch.tensor([i]), op=hvd.Sum)
            self.assertEqual(out.item(), i * hvd.size())

    def test_barrier_orders_side_effects(self):
        # What a rank did before the barrier is visible to everyone after it: each rank writes
        # a file, and after the barrier every rank finds every file.
        import os
        import tempfile
        directory = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, 0)
        with open(os.path.join(directory, "rank%d" % hvd.rank()), "w") as f:
            f.write("x")
        hvd.barrier()
        self.assertEqual(sorted(os.listdir(directory)),
                         sorted("rank%d" % r for r in range(hvd.size())))
        hvd.barrier()
        if hvd.rank() == 0:
            import shutil
            shutil.rmtree(directory)
