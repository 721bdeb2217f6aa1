"""Error cases in Horovod's style: requests that disagree across ranks (shape, dtype, op,
root, kind), bad roots and splits. Horovod raises them as RuntimeError (its
HorovodInternalError) from the call or from synchronize, on every rank; after each, the next
collective must work. Arguments refused before anything is submitted raise ValueError."""

import torch

import ronde.torch as hvd
from horovod_case import HorovodTestCase


class ErrorTests(HorovodTestCase):
    def _still_works(self):
        n = hvd.size()
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum)
        self.assertSame(out, torch.full((3,), float(n)))
        self.assertEqual(hvd.allgather(torch.tensor([hvd.rank()])).tolist(), list(range(n)))

    def _fails_everywhere(self, call):
        with self.assertRaises(RuntimeError):
            call()
        self._still_works()

    def _needs_two(self):
        if hvd.size() < 2:
            self.skipTest("needs two ranks")

    def test_allreduce_shape_mismatch(self):
        self._needs_two()
        me = hvd.rank()
        self._fails_everywhere(lambda: hvd.allreduce(torch.ones(me + 1), name="shape"))
        self._fails_everywhere(lambda: hvd.allreduce(torch.ones(2, me + 1), name="shape2"))
        self._fails_everywhere(lambda: hvd.allreduce(torch.ones([2] * (me + 1)), name="rank"))

    def test_allreduce_dtype_mismatch(self):
        self._needs_two()
        dtype = torch.float32 if hvd.rank() == 0 else torch.int32
        self._fails_everywhere(lambda: hvd.allreduce(torch.ones(3, dtype=dtype), name="dtype"))

    def test_allreduce_op_mismatch(self):
        self._needs_two()
        op = hvd.Sum if hvd.rank() == 0 else hvd.Max
        self._fails_everywhere(lambda: hvd.allreduce(torch.ones(3), op=op, name="op"))

    def test_async_error_is_raised_by_synchronize(self):
        self._needs_two()
        handle = hvd.allreduce_async(torch.ones(hvd.rank() + 2), name="async.shape")
        self._fails_everywhere(lambda: hvd.synchronize(handle))

    def test_grouped_allreduce_one_member_mismatched(self):
        self._needs_two()
        tensors = [torch.ones(4), torch.ones(hvd.rank() + 1), torch.ones(2)]
        self._fails_everywhere(lambda: hvd.grouped_allreduce(tensors, name="grouped.bad"))

    def test_allgather_mismatch(self):
        self._needs_two()
        me = hvd.rank()
        # The first dimension may differ, the others may not; nor the dtype or the rank.
        self._fails_everywhere(lambda: hvd.allgather(torch.ones(2, me + 1), name="ag.shape"))
        dtype = torch.float64 if me == 0 else torch.float32
        self._fails_everywhere(lambda: hvd.allgather(torch.ones(2, dtype=dtype), name="ag.dtype"))
        shape = (2, 2) if me == 0 else (2,)
        self._fails_everywhere(lambda: hvd.allgather(torch.ones(shape), name="ag.rank"))

    def test_broadcast_mismatch_and_bad_root(self):
        self._needs_two()
        me, n = hvd.rank(), hvd.size()
        self._fails_everywhere(lambda: hvd.broadcast(torch.ones(me + 1), 0, name="bc.shape"))
        dtype = torch.int64 if me == 0 else torch.int32
        self._fails_everywhere(lambda: hvd.broadcast(torch.ones(2, dtype=dtype), 0,
                                                     name="bc.dtype"))
        self._fails_everywhere(lambda: hvd.broadcast(torch.ones(2), me, name="bc.root"))
        self._fails_everywhere(lambda: hvd.broadcast(torch.ones(2), n, name="bc.big"))
        self._fails_everywhere(lambda: hvd.broadcast_(torch.ones(2), n + 5, name="bc_.big"))

    def test_alltoall_bad_splits(self):
        n = hvd.size()
        t = torch.ones(4, 2)
        # Splits adding up to more or fewer rows than the tensor has; a negative split; one
        # split per rank missing.
        self._fails_everywhere(lambda: hvd.alltoall(t, splits=[5] + [0] * (n - 1), name="a.sum"))
        self._fails_everywhere(lambda: hvd.alltoall(t, splits=[3] + [0] * (n - 1), name="a.few"))
        self._fails_everywhere(lambda: hvd.alltoall(t, splits=[-1, 5] + [0] * (n - 2),
                                                    name="a.neg"))
        self._fails_everywhere(lambda: hvd.alltoall(t, splits=[4] + [0] * n, name="a.len"))

    def test_alltoall_mismatch(self):
        self._needs_two()
        n, me = hvd.size(), hvd.rank()
        dtype = torch.float32 if me == 0 else torch.float64
        self._fails_everywhere(lambda: hvd.alltoall(torch.ones(n, dtype=dtype), name="a.dtype"))
        self._fails_everywhere(lambda: hvd.alltoall(torch.ones(n, me + 1), name="a.shape"))

    def test_reducescatter_mismatch(self):
        self._needs_two()
        n, me = hvd.size(), hvd.rank()
        self._fails_everywhere(lambda: hvd.reducescatter(torch.ones(n, me + 1), name="rs.shape"))
        op = hvd.Sum if me == 0 else hvd.Average
        self._fails_everywhere(lambda: hvd.reducescatter(torch.ones(n), op=op, name="rs.op"))
        self._fails_everywhere(lambda: hvd.reducescatter(torch.tensor(1.0), name="rs.scalar"))

    def test_kind_mismatch_under_one_name(self):
        self._needs_two()
        if hvd.rank() == 0:
            call = lambda: hvd.allreduce(torch.ones(2), name="kind")  # noqa: E731
        else:
            call = lambda: hvd.allgather(torch.ones(2), name="kind")  # noqa: E731
        # Horovod: "Mismatched operations" on every rank.
        self._fails_everywhere(call)

    def test_refused_before_submission(self):
        n = hvd.size()
        with self.assertRaises(ValueError):
            hvd.allreduce(torch.ones(2, dtype=torch.complex64))
        with self.assertRaises(ValueError):
            hvd.allgather(torch.ones(2, dtype=torch.complex128))
        with self.assertRaises(ValueError):
            hvd.broadcast(torch.ones(2, dtype=torch.complex64), 0)
        with self.assertRaises(ValueError):
            hvd.alltoall(torch.ones(n), splits=torch.ones(n))  # not integer splits
        if n > 1:
            with self.assertRaises(ValueError):
                hvd.alltoall(torch.ones(n + 1))  # rows not divisible without splits
        with self.assertRaises(ValueError):
            hvd.allreduce(torch.ones(2), op=hvd.Sum, average=False)
        self._still_works()

    def test_many_errors_in_a_row(self):
        self._needs_two()
        for i in range(10):
            with self.assertRaises(RuntimeError):
                hvd.allreduce(torch.ones(hvd.rank() + 1 + i), name="again.%d" % i)
        self._still_works()

    def test_duplicate_name_in_flight(self):
        # Horovod refuses a second request under a name still in flight; the first completes.
        n = hvd.size()
        first = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="dup")
        with self.assertRaises((ValueError, RuntimeError)):
            hvd.synchronize(hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="dup"))
        self.assertSame(hvd.synchronize(first), torch.full((2,), float(n)))
        self._still_works()
