"""Horovod 0.28.1's semantics that ronde once lacked (issue 37): reducescatter gradients,
meta tensors refused, HorovodInternalError raised for a failed collective only, unnamed
requests meeting again after a join, and a duplicate process set refused."""

import torch

import ronde.torch as hvd
from horovod_case import HorovodTestCase, rank_input


class ReducescatterGradientTests(HorovodTestCase):
    """Horovod's reducescatter backward: allgather of the output's gradient, multiplied by the
    set's size for Sum and left as it is for Average (then by prescale and postscale)."""

    def _check(self, op, pre, post, grouped=False):
        n, me = hvd.size(), hvd.rank()
        rows = 2 * n
        x = rank_input(me, (rows, 2), torch.float64).requires_grad_()
        if grouped:
            (y,) = hvd.grouped_reducescatter([x], op=op, prescale_factor=pre,
                                             postscale_factor=post)
        else:
            y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
        w = [rank_input(r, (2, 2), torch.float64, -4, 5, seed=9) for r in range(n)]
        (y * w[me]).sum().backward()
        expected = torch.cat(w) * (n if op == hvd.Sum else 1) * pre * post
        self.assertTrue(torch.allclose(x.grad, expected), "%s\n%s" % (x.grad, expected))

    def test_sum(self):
        self._check(hvd.Sum, 1.0, 1.0)

    def test_average(self):
        self._check(hvd.Average, 1.0, 1.0)

    def test_scaled(self):
        self._check(hvd.Sum, 0.5, 3.0)
        self._check(hvd.Average, 2.0, 0.25)

    def test_grouped(self):
        self._check(hvd.Sum, 1.0, 1.0, grouped=True)
        self._check(hvd.Average, 1.0, 1.0, grouped=True)


class MetaTensorTests(HorovodTestCase):
    """A meta tensor has no data: Horovod refuses its type with ValueError before submitting
    anything, and the runtime goes on."""

    def test_refused(self):
        meta = torch.ones(3, device="meta")
        for call in (lambda: hvd.allreduce(meta), lambda: hvd.allreduce_(meta),
                     lambda: hvd.allgather(meta), lambda: hvd.broadcast(meta, 0),
                     lambda: hvd.broadcast_(meta, 0), lambda: hvd.reducescatter(meta),
                     lambda: hvd.alltoall(torch.ones(hvd.size(), device="meta")),
                     lambda: hvd.grouped_allreduce([torch.ones(2), meta])):
            with self.assertRaises(ValueError):
                call()
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
        self.assertTrue(torch.equal(out, torch.full((2,), float(hvd.size()))))


class HorovodInternalErrorTests(HorovodTestCase):
    """Horovod's HorovodInternalError is its own RuntimeError subclass, raised for a failed
    collective (what elastic training recovers from), not the base class of every error."""

    def test_a_class_of_its_own(self):
        self.assertTrue(issubclass(hvd.HorovodInternalError, RuntimeError))
        self.assertIsNot(hvd.HorovodInternalError, hvd.RondeError)

    def test_collective_failure_is_one(self):
        if hvd.size() < 2:
            self.skipTest("needs two ranks")
        with self.assertRaises(hvd.HorovodInternalError):
            hvd.allreduce(torch.ones(hvd.rank() + 1), name="internal.shape")


class JoinUnnamedTests(HorovodTestCase):
    """A rank that joined skipped the others' unnamed allreduces; the collectives that every
    rank calls after join must still meet (Horovod: the unnamed requests after a join match)."""

    def test_unnamed_after_join(self):
        n, me = hvd.size(), hvd.rank()
        for first in range(n):
            if me != first:
                out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
                self.assertTrue(torch.equal(out, torch.full((2,), float(n - 1))))
            hvd.join()
            out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
            self.assertTrue(torch.equal(out, torch.full((2,), float(n))))
            self.assertEqual(hvd.allgather(torch.tensor([me])).tolist(), list(range(n)))


class DuplicateProcessSetTests(HorovodTestCase):
    """Found by this suite. Horovod's add_process_set refuses a set whose ranks equal those of
    a registered set (the global one included): ValueError("Attempted to add a duplicate
    process set"). ronde registered it under a new id."""

    def test_duplicate_is_refused(self):
        n = hvd.size()
        first = hvd.add_process_set([0])
        with self.assertRaises(ValueError):
            hvd.add_process_set([0])
        with self.assertRaises(ValueError):
            hvd.add_process_set(list(range(n)))  # the global set's ranks
        self.assertTrue(hvd.remove_process_set(first))
        self.assertEqual(hvd.add_process_set([0]).process_set_id is not None, True)
