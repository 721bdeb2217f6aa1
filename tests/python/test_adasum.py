"""op=hvd.Adasum against an independent numpy implementation of Horovod's recursion: the
pairwise adaptive sum applied along the binary tree of ranks, per tensor."""

import numpy as np
import pytest
import torch

import ronde.torch as hvd


def power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def pairwise(a, b):
    dot = float(np.dot(a, b))
    anorm, bnorm = float(np.dot(a, a)), float(np.dot(b, b))
    ca = 1.0 - dot / (2 * anorm) if anorm != 0 else 1.0
    cb = 1.0 - dot / (2 * bnorm) if bnorm != 0 else 1.0
    return ca * a + cb * b


def tree(vectors):
    while len(vectors) > 1:
        vectors = [pairwise(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def contribution(rank, shape, seed):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    shared = torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    return shared + torch.randn(*shape, generator=g, dtype=torch.float64)


def expected(shape, seed):
    return tree([contribution(r, shape, seed).numpy().reshape(-1)
                 for r in range(hvd.size())]).reshape(shape)


TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1,), (17,), (40, 30)])
def test_adasum_matches_numpy_recursion(dtype, shape):
    if not power_of_two(hvd.size()):
        pytest.skip("Adasum needs a power-of-two world")
    out = hvd.allreduce(contribution(hvd.rank(), shape, 1).to(dtype), op=hvd.Adasum)
    assert out.dtype == dtype
    assert np.allclose(out.double().numpy(), expected(shape, 1), rtol=TOLERANCE[dtype],
                       atol=TOLERANCE[dtype])


def test_grouped_adasum_is_per_tensor():
    """Fused in one buffer, each tensor keeps its own dot products and norms."""
    if not power_of_two(hvd.size()):
        pytest.skip("Adasum needs a power-of-two world")
    shapes = [(5,), (64, 3), (1,), (300,)]
    tensors = [contribution(hvd.rank(), s, 10 + i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Adasum)
    for i, (s, out) in enumerate(zip(shapes, outs)):
        assert np.allclose(out.numpy(), expected(s, 10 + i), rtol=1e-10, atol=1e-10)


def test_adasum_of_identical_vectors_is_the_vector():
    # a = b: coefficients 1 - |a|^2 / 2|a|^2 = 1/2 each, so a' = a at every level.
    if not power_of_two(hvd.size()):
        pytest.skip("Adasum needs a power-of-two world")
    t = torch.arange(1.0, 8.0, dtype=torch.float64)
    assert torch.allclose(hvd.allreduce(t, op=hvd.Adasum), t)


def test_adasum_refuses_a_world_that_is_not_a_power_of_two():
    if power_of_two(hvd.size()):
        pytest.skip("needs a world of 3, 5, ... ranks")
    with pytest.raises(hvd.RondeError, match="power-of-two"):
        hvd.allreduce(torch.ones(4), op=hvd.Adasum)


def test_adasum_refuses_integer_tensors():
    with pytest.raises(hvd.RondeError, match="Adasum"):
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum)


def test_distributed_optimizer_with_adasum_applies_the_adasum_of_gradients():
    if not power_of_two(hvd.size()) or hvd.size() == 1:
        pytest.skip("Adasum across several ranks needs a power-of-two world")
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    before = [p.detach().clone() for p in model.parameters()]
    x = contribution(hvd.rank(), (4, 6), 20)
    # This rank's own gradients, from a copy without the optimizer's hooks: the hooks reduce
    # p.grad in place, and may already have done so by the time backward() returns.
    reference = torch.nn.Linear(6, 3).double()
    reference.load_state_dict(model.state_dict())
    reference(x).pow(2).sum().backward()
    grads = [p.grad.detach().clone() for p in reference.parameters()]
    model(x).pow(2).sum().backward()
    opt.step()
    for p, b, g in zip(model.parameters(), before, grads):
        everyone = hvd.allgather(g.unsqueeze(0)).numpy()
        want = tree([e.reshape(-1) for e in everyone]).reshape(g.shape)
        assert np.allclose((b - p.detach()).numpy(), want, rtol=1e-10, atol=1e-12)
