"""Gradients through collectives, checked against finite differences of the global loss.

The global loss is the sum over ranks of each rank's (output * w_rank).sum(). allreduce and
alltoall give the gradient of that sum; allgather and broadcast, as in Horovod, give the
gradient of the mean over ranks, and reducescatter, as in Horovod (HorovodReducescatter's
backward: the allgathered gradient, times the size for Sum), size times the gradient of the sum.
"""

import torch

import ronde.torch as hvd

EPS = 1e-6


def weights(shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(1000 + hvd.rank()),
                       dtype=torch.float64)


def global_loss(fn, x, w):
    local = (fn(x) * w).sum()
    return hvd.allreduce(local.detach(), op=hvd.Sum, name=None).item()


def check_gradient(fn, x, scale):
    x = x.double().clone().requires_grad_()
    out = fn(x)
    w = weights(out.shape)
    (out * w).sum().backward()
    analytic = x.grad.clone()

    numeric = torch.zeros_like(analytic)
    count = torch.tensor([x.numel()])
    sizes = hvd.allgather(count).tolist()  # every rank loops over every rank's elements
    for owner in range(hvd.size()):
        for i in range(sizes[owner]):
            losses = []
            for sign in (1, -1):
                probe = x.detach().clone()
                if hvd.rank() == owner:
                    probe.view(-1)[i] += sign * EPS
                losses.append(global_loss(fn, probe, w))
            if hvd.rank() == owner:
                numeric.view(-1)[i] = (losses[0] - losses[1]) / (2 * EPS)
    assert torch.allclose(analytic, numeric * scale, atol=1e-5), (analytic, numeric * scale)


def test_allreduce_sum_gradient():
    check_gradient(lambda x: hvd.allreduce(x, op=hvd.Sum) * x, torch.randn(3), 1.0)


def test_allreduce_average_gradient():
    check_gradient(lambda x: hvd.allreduce(x * x, op=hvd.Average), torch.randn(2, 2), 1.0)


def test_grouped_allreduce_gradient():
    check_gradient(lambda x: torch.cat(hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum)),
                   torch.randn(3), 1.0)


def test_allgather_gradient():
    x = torch.randn(hvd.rank() + 1, 2)
    check_gradient(lambda x: hvd.allgather(x), x, 1.0 / hvd.size())


def test_broadcast_gradient():
    check_gradient(lambda x: hvd.broadcast(x * x, root_rank=0), torch.randn(3), 1.0 / hvd.size())


def test_alltoall_gradient():
    splits = [1] * hvd.size()
    x = torch.randn(hvd.size(), 2)
    check_gradient(lambda x: hvd.alltoall(x, splits=splits)[0], x, 1.0)


def test_reducescatter_sum_gradient():
    # Each rank's input reaches every rank's share: the allgather of theirs, times the size.
    x = torch.randn(2 * hvd.size() + 1, 2)
    check_gradient(lambda x: hvd.reducescatter(x, op=hvd.Sum), x, hvd.size())


def test_reducescatter_sum_gradient_with_scaling():
    x = torch.randn(hvd.size(), 3)
    check_gradient(lambda x: hvd.reducescatter(x * x, op=hvd.Sum, prescale_factor=0.5,
                                               postscale_factor=3.0), x, hvd.size())


def test_reducescatter_average_gradient_with_scaling():
    x = torch.randn(hvd.size(), 3)
    check_gradient(lambda x: hvd.reducescatter(x * x, op=hvd.Average, prescale_factor=0.5,
                                               postscale_factor=3.0), x, hvd.size())


def test_grouped_reducescatter_gradient():
    x = torch.randn(hvd.size() + 1, 2)
    check_gradient(lambda x: torch.cat([o.reshape(-1) for o in hvd.grouped_reducescatter(
        [x, 2 * x[:hvd.size()]], op=hvd.Sum)]), x, hvd.size())


def test_grouped_reducescatter_average_gradient():
    x = torch.randn(hvd.size() + 1, 2)
    check_gradient(lambda x: torch.cat([o.reshape(-1) for o in hvd.grouped_reducescatter(
        [x * x, 2 * x[:hvd.size()]], op=hvd.Average)]), x, hvd.size())


def test_grouped_allgather_gradient():
    # As allgather: Horovod's gradient is that of the mean over ranks.
    x = torch.randn(hvd.rank() + 1, 2)
    check_gradient(lambda x: torch.cat([o.reshape(-1) for o in hvd.grouped_allgather(
        [x, x[:1] * 3])]), x, 1.0 / hvd.size())
