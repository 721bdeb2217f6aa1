"""join in Horovod's style: each rank in turn joins first while the others go on reducing.
A joined rank adds zeros to every allreduce (Average still divides by the full size, as in
Horovod: with identical inputs the result is tensor * (size - 1) / size); any other collective
fails on the ranks still working; join returns, on every rank, the rank that joined last.
Requests are named here: unnamed ones after a join are in test_horovod_semantics.py."""

import itertools

import torch

import ronde.torch as hvd
from horovod_case import NUMERIC_DTYPES, HorovodTestCase, rank_input
from test_allreduce import reference


class JoinTests(HorovodTestCase):
    def _check_last(self, last, first):
        everyone = hvd.allgather(torch.tensor([last]), name="join.last")
        self.assertEqual(everyone.tolist(), [last] * hvd.size())
        self.assertTrue(0 <= last < hvd.size())
        if hvd.size() > 1:
            # The first rank's join completed the others' allreduces, so it joined earlier.
            self.assertNotEqual(last, first)

    def test_allreduce_every_first_joining_rank(self):
        n, me = hvd.size(), hvd.rank()
        for first, op in itertools.product(range(n), [hvd.Sum, hvd.Average, hvd.Max, hvd.Min]):
            # Two requests in flight at once, so that they may be fused with the zeros.
            shapes = [(5,), (17, 2)]
            inputs = [[rank_input(r, s, torch.float32, seed=i) for i, s in enumerate(shapes)]
                      for r in range(n)]
            if me == first:
                last = hvd.join()
            else:
                handles = [hvd.allreduce_async(inputs[me][i], op=op, name="j.%d" % i)
                           for i in range(len(shapes))]
                outs = [hvd.synchronize(h) for h in handles]
                last = hvd.join()
                for i, out in enumerate(outs):
                    # The joined rank's input is zeros.
                    rows = [inputs[r][i] if r != first else torch.zeros(shapes[i])
                            for r in range(n)]
                    if op == hvd.Average:
                        want = torch.stack(rows).double().sum(0).div(n).float()
                        self.assertClose(out, want, "first %d average" % first)
                    else:
                        self.assertSame(out, reference(op, rows, torch.float32),
                                        "first %d op %s" % (first, op))
            self._check_last(last, first)

    def test_identical_inputs_average_is_scaled_by_size_minus_one_over_size(self):
        # Horovod's own check: every rank has the same tensor; one joined.
        n, me = hvd.size(), hvd.rank()
        for first, dtype in itertools.product(range(n), [torch.int32, torch.int64,
                                                         torch.float32, torch.float64]):
            tensor = rank_input(0, (4, 3), dtype, -100, 100) * n
            if me == first:
                last = hvd.join()
            else:
                out = hvd.allreduce(tensor, op=hvd.Average, name="identical")
                last = hvd.join()
                want = (tensor.double() * (n - 1) / n).to(dtype)
                self.assertClose(out, want, str(dtype))
            self._check_last(last, first)

    def test_sum_every_dtype_with_several_joined(self):
        n, me = hvd.size(), hvd.rank()
        for joined, dtype in itertools.product(range(1, n), NUMERIC_DTYPES):
            # Ranks below `joined` join at once; the others reduce twice, in place.
            inputs = [rank_input(r, (6,), dtype, 0, 10) for r in range(n)]
            if me < joined:
                last = hvd.join()
            else:
                t = inputs[me].clone()
                hvd.allreduce_(t, op=hvd.Sum, name="several")
                want = reference(hvd.Sum, inputs[joined:], dtype)
                self.assertSame(t, want, "%d joined, %s" % (joined, dtype))
                grouped = hvd.grouped_allreduce([inputs[me], inputs[me][:2]], op=hvd.Sum,
                                                name="several.grouped")
                self.assertSame(grouped[0], want)
                self.assertSame(grouped[1], want[:2])
                last = hvd.join()
            self.assertGreaterEqual(last, joined)

    def test_other_collectives_fail_while_a_rank_has_joined(self):
        # Horovod: allgather and broadcast raise on the ranks that did not join.
        n, me = hvd.size(), hvd.rank()
        if n == 1:
            self.skipTest("needs two ranks")
        for first in range(n):
            if me == first:
                last = hvd.join()
            else:
                other = (first + 1) % n
                with self.assertRaises(RuntimeError):
                    hvd.allgather(torch.ones(2, 3), name="joined.allgather")
                with self.assertRaises(RuntimeError):
                    hvd.broadcast(torch.ones(2), other, name="joined.broadcast")
                with self.assertRaises(RuntimeError):
                    hvd.reducescatter(torch.ones(n, 2), name="joined.reducescatter")
                with self.assertRaises(RuntimeError):
                    hvd.alltoall(torch.ones(n), name="joined.alltoall")
                # allreduce still works after those errors.
                out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="joined.after")
                self.assertSame(out, torch.full((2,), float(n - 1)))
                last = hvd.join()
            self._check_last(last, first)
            # Everything works again once every rank has joined.
            out = hvd.allgather(torch.tensor([me]), name="joined.again")
            self.assertEqual(out.tolist(), list(range(n)))

    def test_everyone_joins_with_no_work(self):
        for _ in range(3):
            last = hvd.join()
            self._check_last(last, first=-1)

    def test_joins_with_allreduces_in_between(self):
        # Rounds of uneven work: in round k rank r runs (r + k) % n + 1 allreduces, then joins.
        n, me = hvd.size(), hvd.rank()
        for k in range(n):
            steps = (me + k) % n + 1
            for step in range(steps):
                out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="round.%d" % step)
                # Ranks with more than `step` steps contribute ones.
                contributors = sum(1 for r in range(n) if (r + k) % n + 1 > step)
                self.assertSame(out, torch.full((3,), float(contributors)))
            last = hvd.join()
            everyone = hvd.allgather(torch.tensor([last]), name="round.last")
            self.assertEqual(everyone.tolist(), [last] * n)
            if n > 1:
                # The one rank with n steps joined last.
                self.assertEqual(last, [r for r in range(n) if (r + k) % n + 1 == n][0])
