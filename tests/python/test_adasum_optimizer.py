"""DistributedOptimizer(op=hvd.Adasum) against a reference computed in one process: every
rank's local optimizer step from the shared parameters, then numpy's Adasum recursion over the
per-rank parameter deltas (Horovod's _DistributedAdasumOptimizer semantics)."""

import copy

import numpy as np
import pytest
import torch

import ronde.torch as hvd
from test_adasum import contribution, power_of_two, tree


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 2)).double()


def loss_of(model, rank, step):
    x = contribution(rank, (8, 5), 40 + step)
    return model(x).pow(2).mean() + model(x).sum() * 0.1


def reference_parameters(steps, make_optimizer):
    """Each rank's optimizer (its own state) steps from the shared parameters on its own
    data; the shared parameters then move by the Adasum of the deltas."""
    shared = make_model()
    replicas = [copy.deepcopy(shared) for _ in range(hvd.size())]
    optimizers = [make_optimizer(m) for m in replicas]
    for step in range(steps):
        deltas = []
        for rank, (model, opt) in enumerate(zip(replicas, optimizers)):
            model.load_state_dict(shared.state_dict())
            opt.zero_grad()
            loss_of(model, rank, step).backward()
            opt.step()
            deltas.append([(p - s).detach().numpy() for p, s in
                           zip(model.parameters(), shared.parameters())])
        with torch.no_grad():
            for i, p in enumerate(shared.parameters()):
                combined = tree([d[i].reshape(-1) for d in deltas]).reshape(p.shape)
                p.add_(torch.from_numpy(combined))
    return [p.detach().numpy() for p in shared.parameters()]


OPTIMIZERS = {
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=0.05),
    "sgd_momentum": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
}


def needs_adasum_world():
    if hvd.size() == 1 or not power_of_two(hvd.size()):
        pytest.skip("the Adasum optimizer needs a power-of-two world of 2 or more ranks")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("compression,tolerance", [(hvd.Compression.none, 1e-10),
                                                   (hvd.Compression.fp16, 2e-3)])
def test_adasum_optimizer_combines_the_deltas_of_local_steps(name, compression, tolerance):
    needs_adasum_world()
    steps = 4
    model = make_model()
    opt = hvd.DistributedOptimizer(OPTIMIZERS[name](model),
                                   named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, compression=compression)
    for step in range(steps):
        opt.zero_grad()
        loss_of(model, hvd.rank(), step).backward()
        opt.step()
    want = reference_parameters(steps, OPTIMIZERS[name])
    for p, w in zip(model.parameters(), want):
        assert np.allclose(p.detach().numpy(), w, rtol=tolerance, atol=tolerance)
    # Every rank holds the same parameters, while each keeps its own optimizer state.
    for p in model.parameters():
        gathered = hvd.allgather(p.detach().unsqueeze(0))
        assert torch.equal(gathered[0], gathered[-1])


def test_adasum_of_adam_deltas_differs_from_adasum_of_gradients():
    """The point of combining deltas: Adam's step is not linear in the gradient."""
    needs_adasum_world()
    want = reference_parameters(2, OPTIMIZERS["adam"])
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(2):  # Adam on the Adasum of the gradients, in one process
        grads = []
        for rank in range(hvd.size()):
            model.zero_grad()
            loss_of(model, rank, step).backward()
            grads.append([p.grad.detach().numpy().reshape(-1) for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = torch.from_numpy(tree([g[i] for g in grads]).reshape(p.shape))
        opt.step()
    gap = max(np.abs(p.detach().numpy() - w).max() for p, w in zip(model.parameters(), want))
    assert gap > 1e-3


def test_adasum_optimizer_with_identical_data_is_the_local_optimizer():
    # Equal deltas d on every rank: each pairwise level gives d/2 + d/2 = d.
    needs_adasum_world()
    model, local = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    local_opt = torch.optim.Adam(local.parameters(), lr=0.05)
    for step in range(3):
        for m, o in ((model, opt), (local, local_opt)):
            o.zero_grad()
            loss_of(m, 0, step).backward()
            o.step()
    for p, q in zip(model.parameters(), local.parameters()):
        assert torch.allclose(p, q, rtol=1e-12, atol=1e-12)


def test_adasum_optimizer_accumulates_backward_passes():
    needs_adasum_world()
    model, local = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    local_opt = torch.optim.SGD(local.parameters(), lr=0.1)
    for m, o in ((model, opt), (local, local_opt)):
        o.zero_grad()
        loss_of(m, 0, 0).backward()
        loss_of(m, 0, 1).backward()
        o.step()
    for p, q in zip(model.parameters(), local.parameters()):
        assert torch.allclose(p, q, rtol=1e-12, atol=1e-12)


def test_adasum_optimizer_refuses_what_it_cannot_do():
    needs_adasum_world()
    model = make_model()
    with pytest.raises(ValueError, match="Compression.none, fp16 or bf16"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), op=hvd.Adasum,
                                 compression=hvd.Compression.topk(0.1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    with pytest.raises(AssertionError, match="skip_synchronize"):
        with opt.skip_synchronize():
            pass


def test_adasum_optimizer_refuses_a_world_that_is_not_a_power_of_two():
    if power_of_two(hvd.size()):
        pytest.skip("needs a world of 3, 5, ... ranks")
    model = make_model()
    with pytest.raises(ValueError, match="power-of-two.*rank %d" % hvd.rank()):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), op=hvd.Adasum)
