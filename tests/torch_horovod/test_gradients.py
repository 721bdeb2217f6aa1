"""Gradients through the collectives, as Horovod defines them, against references computed
here by hand from every rank's known loss weights. Each rank's loss is (output * weights_r)
summed, so the gradient that reaches the output on rank r is weights_r:
  allreduce(op, pre, post): allreduce of the weights with the same op and scaling;
  allgather: the average over ranks of the weights, this rank's rows;
  broadcast: the average over ranks of the weights on the root, zeros elsewhere;
  alltoall: the weights sent back along the received splits.
reducescatter's gradient is in test_horovod_semantics.py."""

import torch

import ronde.torch as hvd
from horovod_case import HorovodTestCase, rank_input
from test_collectives import alltoall_splits, rows_of


def weights(rank, shape, seed=0):
    return rank_input(rank, shape, torch.float64, -4, 5, seed=50 + seed)


class GradientTests(HorovodTestCase):
    def test_allreduce(self):
        n, me = hvd.size(), hvd.rank()
        shape = (3, 2)
        w = [weights(r, shape) for r in range(n)]
        for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                              (hvd.Sum, 0.5, 4.0), (hvd.Average, 2.0, 0.25)]:
            x = rank_input(me, shape, torch.float64).requires_grad_()
            y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
            (y * w[me]).sum().backward()
            summed = sum(w)
            expected = (summed / n if op == hvd.Average else summed) * pre * post
            self.assertClose(x.grad, expected, "op %s pre %s post %s" % (op, pre, post))

    def test_grouped_allreduce(self):
        n, me = hvd.size(), hvd.rank()
        shapes = [(4,), (2, 3)]
        xs = [rank_input(me, s, torch.float64, seed=i).requires_grad_()
              for i, s in enumerate(shapes)]
        ys = hvd.grouped_allreduce(xs, op=hvd.Average)
        sum((y * weights(me, s, i)).sum() for i, (y, s) in enumerate(zip(ys, shapes))).backward()
        for i, (x, s) in enumerate(zip(xs, shapes)):
            self.assertClose(x.grad, sum(weights(r, s, i) for r in range(n)) / n)

    def test_allgather(self):
        n, me = hvd.size(), hvd.rank()
        x = rank_input(me, (rows_of(me), 3), torch.float64).requires_grad_()
        y = hvd.allgather(x)
        total = sum(rows_of(r) for r in range(n))
        (y * weights(me, (total, 3))).sum().backward()
        average = sum(weights(r, (total, 3)) for r in range(n)) / n
        start = sum(rows_of(r) for r in range(me))
        self.assertClose(x.grad, average[start:start + rows_of(me)])

    def test_grouped_allgather(self):
        n, me = hvd.size(), hvd.rank()
        xs = [rank_input(me, (rows_of(me) + i, 2), torch.float64, seed=i).requires_grad_()
              for i in range(2)]
        ys = hvd.grouped_allgather(xs)
        totals = [sum(rows_of(r) + i for r in range(n)) for i in range(2)]
        sum((y * weights(me, (t, 2), i)).sum()
            for i, (y, t) in enumerate(zip(ys, totals))).backward()
        for i, (x, t) in enumerate(zip(xs, totals)):
            average = sum(weights(r, (t, 2), i) for r in range(n)) / n
            start = sum(rows_of(r) + i for r in range(me))
            self.assertClose(x.grad, average[start:start + rows_of(me) + i])

    def test_broadcast_every_root(self):
        n, me = hvd.size(), hvd.rank()
        for root in range(n):
            x = rank_input(me, (5,), torch.float64).requires_grad_()
            y = hvd.broadcast(x, root)
            (y * weights(me, (5,), root)).sum().backward()
            if me == root:
                expected = sum(weights(r, (5,), root) for r in range(n)) / n
            else:
                expected = torch.zeros(5, dtype=torch.float64)
            self.assertClose(x.grad, expected, "root %d" % root)

    def test_alltoall(self):
        n, me = hvd.size(), hvd.rank()
        splits = [alltoall_splits(r, n, seed=3) for r in range(n)]
        x = rank_input(me, (sum(splits[me]), 2), torch.float64).requires_grad_()
        y, received = hvd.alltoall(x, splits=splits[me])
        self.assertEqual(received.tolist(), [splits[s][me] for s in range(n)])
        rows_in = [sum(splits[s][d] for s in range(n)) for d in range(n)]
        (y * weights(me, (rows_in[me], 2))).sum().backward()
        # The rows this rank sent to d sit in d's output after what lower ranks sent to d.
        parts = []
        for d in range(n):
            offset = sum(splits[s][d] for s in range(me))
            parts.append(weights(d, (rows_in[d], 2))[offset:offset + splits[me][d]])
        self.assertSame(x.grad, torch.cat(parts))

    def test_alltoall_even(self):
        n, me = hvd.size(), hvd.rank()
        x = rank_input(me, (2 * n,), torch.float64).requires_grad_()
        y = hvd.alltoall(x)
        (y * weights(me, (2 * n,))).sum().backward()
        expected = torch.cat([weights(d, (2 * n,))[2 * me:2 * me + 2] for d in range(n)])
        self.assertSame(x.grad, expected)

    def test_distributed_optimizer_averages_gradients(self):
        # One step of DistributedOptimizer: each parameter's gradient is the average of every
        # rank's, so the updated weights equal the single-process update with that average.
        n, me = hvd.size(), hvd.rank()
        model = torch.nn.Linear(3, 1, bias=False).double()
        with torch.no_grad():
            model.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters())
        inputs = [rank_input(r, (4, 3), torch.float64) for r in range(n)]
        opt.zero_grad()
        model(inputs[me]).sum().backward()
        opt.step()
        # d/dw of sum(x @ w.T) is the column sums of x.
        average = sum(x.sum(0) for x in inputs) / n
        expected = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64) - 0.5 * average
        self.assertClose(model.weight.detach(), expected.unsqueeze(0).reshape(1, 3))
