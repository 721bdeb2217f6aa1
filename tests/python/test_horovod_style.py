"""A suite written the way Horovod's own test_torch.py is: a unittest.TestCase whose every test
starts with hvd.init() and ends with hvd.barrier() and hvd.shutdown(). Run start to end in one
pytest session under `ronde run -np N`, it checks that shutdown and init can follow each other
any number of times: unnamed requests are numbered from 0 again, process set ids restart, and
nothing of the previous runtime (handles, store keys) is seen by the next."""

import time
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import ronde.torch as hvd


def wait_for(handle, seconds=20.0):
    """synchronize(handle), failing instead of hanging when the peers never meet it."""
    deadline = time.monotonic() + seconds
    while not hvd.poll(handle):
        if time.monotonic() > deadline:
            raise AssertionError("request did not complete in %ss" % seconds)
        time.sleep(0.005)
    return hvd.synchronize(handle)


class HorovodStyleTests(unittest.TestCase):
    def setUp(self):
        hvd.init()

    def tearDown(self):
        hvd.barrier()
        hvd.shutdown()

    def test_init_state(self):
        self.assertTrue(hvd.is_initialized())
        self.assertTrue(0 <= hvd.rank() < hvd.size())
        self.assertEqual(hvd.global_process_set.process_set_id, 0)

    def test_allreduce_sum_and_average(self):
        for dtype in (torch.int32, torch.int64, torch.float32, torch.float64):
            t = torch.full((17,), hvd.rank() + 1).to(dtype)
            total = hvd.allreduce(t, op=hvd.Sum)
            self.assertEqual(total.tolist(), [hvd.size() * (hvd.size() + 1) // 2] * 17)
        avg = hvd.allreduce(torch.full((5,), float(hvd.rank())))
        self.assertTrue(torch.allclose(avg, torch.full((5,), (hvd.size() - 1) / 2.0)))

    def test_allreduce_async_in_place(self):
        tensors = [torch.full((3,), float(i + hvd.rank())) for i in range(4)]
        handles = [hvd.allreduce_async_(t, op=hvd.Sum) for t in tensors]
        for i, (t, h) in enumerate(zip(tensors, handles)):
            self.assertIs(hvd.synchronize(h), t)
            self.assertEqual(t.tolist(), [float(i * hvd.size() + sum(range(hvd.size())))] * 3)

    def test_unnamed_requests_are_numbered_from_zero_after_init(self):
        # Only rank 0 numbers an extra request in a set of its own. Without a fresh numbering
        # after shutdown/init, the next test's unnamed requests would differ on rank 0.
        if hvd.size() < 2:
            self.skipTest("alone, rank 0's set is the global one (a duplicate is refused)")
        alone = hvd.add_process_set([0])
        if hvd.rank() == 0:
            hvd.allreduce(torch.ones(1), process_set=alone)
        self.assertEqual(alone.process_set_id, 1)

    def test_unnamed_requests_in_a_set_with_the_reused_id(self):
        # The previous test's set had id 1 and held rank 0 alone; this one has id 1 again.
        # (Not every rank: that is the global set, and a duplicate is refused.)
        if hvd.size() < 2:
            self.skipTest("needs a set besides the global one")
        last = hvd.add_process_set([hvd.size() - 1])
        self.assertEqual(last.process_set_id, 1)
        if last.included():
            handle = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, process_set=last)
            self.assertEqual(wait_for(handle).tolist(), [1.0] * 2)

    def test_allgather_uneven(self):
        t = torch.full((hvd.rank() + 1, 2), float(hvd.rank()))
        out = hvd.allgather(t)
        expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(hvd.size())])
        self.assertTrue(torch.equal(out, expected))
        outs = hvd.grouped_allgather([t, t[:1] * 2])
        self.assertTrue(torch.equal(outs[0], expected))
        self.assertEqual(outs[1][:, 0].tolist(), [2.0 * r for r in range(hvd.size())])

    def test_broadcast_every_root(self):
        for root in range(hvd.size()):
            t = torch.full((4,), float(hvd.rank()))
            self.assertEqual(hvd.broadcast(t, root).tolist(), [float(root)] * 4)
            hvd.broadcast_(t, root)
            self.assertEqual(t.tolist(), [float(root)] * 4)

    def test_broadcast_in_a_process_set_takes_a_global_root(self):
        if hvd.size() < 2:
            self.skipTest("needs two ranks")
        upper = hvd.add_process_set(list(range(1, hvd.size())))
        if upper.included():
            t = torch.full((2,), float(hvd.rank()))
            self.assertEqual(hvd.broadcast(t, hvd.size() - 1, process_set=upper).tolist(),
                             [hvd.size() - 1.0] * 2)
            with self.assertRaises(ValueError):
                hvd.broadcast(t, 0, process_set=upper)

    def test_alltoall_and_reducescatter(self):
        n, me = hvd.size(), hvd.rank()
        t = torch.arange(n, dtype=torch.float32) + 100 * me
        out, received = hvd.alltoall(t, splits=[1] * n)
        self.assertEqual(out.tolist(), [100.0 * r + me for r in range(n)])
        self.assertEqual(received.tolist(), [1] * n)
        with self.assertRaises(ValueError):
            hvd.alltoall(t, splits=torch.ones(n))
        share = hvd.reducescatter(torch.ones(2 * n, 3), op=hvd.Sum)
        self.assertTrue(torch.equal(share, torch.full((2, 3), float(n))))

    def test_gradient_through_reducescatter(self):
        x = torch.ones(hvd.size(), 2, requires_grad=True)
        hvd.reducescatter(x, op=hvd.Average).sum().backward()
        # Horovod's gradient for Average: the allgathered output gradient, unscaled.
        self.assertTrue(torch.allclose(x.grad, torch.ones_like(x)))

    def test_objects(self):
        got = hvd.broadcast_object({"root": hvd.rank()}, root_rank=0)
        self.assertEqual(got, {"root": 0})
        self.assertEqual(hvd.allgather_object(hvd.rank()), list(range(hvd.size())))

    def test_sparse_allreduce(self):
        dense = torch.zeros(4, 2)
        dense[hvd.rank() % 4] = 1.0
        out = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Sum)()
        expected = sum(torch.zeros(4, 2).index_fill_(0, torch.tensor([r % 4]), 1.0)
                       for r in range(hvd.size()))
        self.assertTrue(torch.equal(out.to_dense(), expected))

    def test_distributed_optimizer(self):
        torch.manual_seed(hvd.rank())
        model = nn.Linear(3, 1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        for step in range(3):
            opt.zero_grad()
            x = torch.full((2, 3), float(hvd.rank() + step))
            F.mse_loss(model(x), torch.zeros(2, 1)).backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        everyone = hvd.allgather(flat.unsqueeze(0))
        for row in everyone:
            self.assertTrue(torch.equal(row, everyone[0]))

    def test_process_sets_given_to_init_are_registered_again(self):
        if hvd.size() < 2:
            self.skipTest("alone, any set is the global one (a duplicate is refused)")
        pair = hvd.ProcessSet([0, hvd.size() - 1] if hvd.size() > 2 else [1])
        hvd.shutdown()
        hvd.init(process_sets=[pair])
        self.assertEqual(pair.process_set_id, 1)
        if pair.included():
            out = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=pair)
            self.assertEqual(out.item(), float(pair.size()))
        # One rank's shutdown stops every rank: a rank outside the pair, which has no work,
        # must not stop the pair's allreduce before it ran.
        hvd.barrier()
        hvd.shutdown()
        self.assertIsNone(pair.process_set_id)
        hvd.init(process_sets=[pair])
        self.assertEqual(pair.process_set_id, 1)

    def test_init_after_a_peers_shutdown_starts_no_runtime_alone(self):
        # Rank 0 shuts down first, and the others' runtime stops with it. If their init() then
        # started the next runtime, their shutdown() below would stop rank 0's next one and
        # their second init() would wait for a runtime rank 0 never starts.
        if hvd.size() < 2:
            self.skipTest("needs two ranks")
        if hvd.rank() == 0:
            hvd.shutdown()
        else:
            deadline = time.monotonic() + 20.0
            while hvd.is_initialized():
                self.assertLess(time.monotonic(), deadline, "rank 0's shutdown did not stop this rank")
                time.sleep(0.005)
            hvd.init()
            self.assertFalse(hvd.is_initialized())
            with self.assertRaisesRegex(hvd.HorovodInternalError, "shut down by rank 0"):
                hvd.allreduce(torch.ones(1), name="after.stop")
        hvd.shutdown()
        hvd.init()
        out = wait_for(hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="after.init"))
        self.assertEqual(out.item(), float(hvd.size()))

    def test_join(self):
        if hvd.rank() == 0:
            last = hvd.join()
        else:
            out = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="join.sum")
            self.assertEqual(out.item(), hvd.size() - 1.0)
            last = hvd.join()
        self.assertEqual(hvd.allgather(torch.tensor([last])).tolist(), [last] * hvd.size())


if __name__ == "__main__":
    unittest.main()
