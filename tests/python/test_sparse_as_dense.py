"""DistributedOptimizer(sparse_as_dense=True) reduces a sparse gradient as a dense tensor and,
as Horovod does, makes it sparse again before the wrapped optimizer steps, so that an optimizer
that takes sparse gradients only (torch.optim.SparseAdam) works. Before, p.grad stayed dense
and SparseAdam raised "SparseAdam does not support dense gradients".

The reference is computed on every rank without collectives: each rank's batch is seeded by its
rank, so any rank can build every rank's gradient, average them, and step a plain SparseAdam."""

import torch
import torch.nn as nn

import ronde.torch as hvd

VOCAB, DIM = 10, 3


def _batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    # Rows 0..VOCAB-1, different on each rank; some rows never drawn by anyone.
    return torch.randint(0, VOCAB - 2, (4,), generator=g)


def _model():
    torch.manual_seed(7)
    return nn.Embedding(VOCAB, DIM, sparse=True).double()


def _loss(model, ids):
    return (model(ids) ** 2).sum()


def _reference_step(model, optimizer, step, size):
    grads = []
    for rank in range(size):
        model.zero_grad()
        _loss(model, _batch(rank, step)).backward()
        grads.append(model.weight.grad.to_dense())
    # What the distributed optimizer hands SparseAdam: the dense average, made sparse.
    model.weight.grad = (sum(grads) / size).to_sparse()
    optimizer.step()


def test_sparse_adam_with_sparse_as_dense():
    model, reference = _model(), _model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SparseAdam(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         sparse_as_dense=True)
    reference_optimizer = torch.optim.SparseAdam(reference.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        _loss(model, _batch(hvd.rank(), step)).backward()
        optimizer.step()
        assert model.weight.grad.is_sparse
        _reference_step(reference, reference_optimizer, step, hvd.size())
        assert torch.allclose(model.weight, reference.weight, atol=1e-12), step


def test_sparse_as_dense_gradient_is_the_sparse_average():
    model = _model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters(),
                                         sparse_as_dense=True)
    _loss(model, _batch(hvd.rank(), 0)).backward()
    optimizer.synchronize()
    got = model.weight.grad
    assert got.is_sparse
    expected = torch.zeros(VOCAB, DIM, dtype=torch.float64)
    for rank in range(hvd.size()):
        reference = _model()
        _loss(reference, _batch(rank, 0)).backward()
        expected += reference.weight.grad.to_dense()
    assert torch.allclose(got.to_dense(), expected / hvd.size(), atol=1e-12)
    with optimizer.skip_synchronize():
        optimizer.step()
