"""DistributedOptimizer and the state helpers against single-process training on the
combined batch."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ronde.torch as hvd


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)).double()


def global_batch(step, rows_per_rank=4):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(rows_per_rank * hvd.size(), 4, generator=g, dtype=torch.float64)
    y = torch.randn(rows_per_rank * hvd.size(), 2, generator=g, dtype=torch.float64)
    return x, y


def my_slice(t):
    rows = t.shape[0] // hvd.size()
    return t[hvd.rank() * rows:(hvd.rank() + 1) * rows]


def same_on_every_rank(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0))
    return all(torch.equal(everyone[0], row) for row in everyone)


def train(distributed_kwargs, steps=3, passes=1, rtol=1e-9, atol=1e-10):
    model = make_model()
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **distributed_kwargs)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(passes):
            x, y = global_batch(10 * step + micro)
            F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
            # The combined batch: the mean over ranks of each rank's mean loss.
            F.mse_loss(reference(x), y).backward()
        opt.step()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, rtol=rtol, atol=atol), (p - q).abs().max()
    assert same_on_every_rank(model)


def test_matches_combined_batch():
    train({})


def test_backward_passes_per_step():
    train({}, passes=2)


def test_fp16_compression():
    train({"compression": hvd.Compression.fp16}, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("groups", [1, 2])
def test_groups(groups):
    train({"groups": groups})


def test_explicit_groups():
    model = make_model()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   groups=[params[:2], params[2:]])
    x, y = global_batch(0)
    F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
    opt.step()
    assert same_on_every_rank(model)


def test_predivide_factor():
    train({"gradient_predivide_factor": 2.0})


def test_skip_synchronize_with_clipping():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(3)
    F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    assert same_on_every_rank(model)


def test_zero_grad_before_step_is_refused():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(4)
    F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError):
            opt.zero_grad()
    opt.step()


def test_duplicate_and_missing_names():
    model = make_model()
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("same", p) for _, p in named])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named[:-1])
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[p for _, p in named])


def test_unused_parameter_gets_reduced_zero():
    # A parameter only some ranks use: the others contribute zeros instead of hanging.
    model = make_model()
    extra = nn.Parameter(torch.ones(3, dtype=torch.float64))
    params = list(model.parameters()) + [extra]
    named = list(model.named_parameters()) + [("extra", extra)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named)
    x, y = global_batch(5)
    loss = F.mse_loss(model(my_slice(x)), my_slice(y))
    if hvd.rank() == 0:
        loss = loss + extra.sum()
    loss.backward()
    opt.step()
    assert torch.allclose(extra, torch.full((3,), 1.0 - 1.0 / hvd.size(), dtype=torch.float64))


def test_broadcast_parameters_and_optimizer_state():
    model = make_model(seed=hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9)
    x, y = global_batch(6)
    F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
    opt.step()  # momentum buffers now differ per rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert same_on_every_rank(model)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    buffers = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1)
                         for p in model.parameters()])
    everyone = hvd.allgather(buffers.unsqueeze(0))
    assert all(torch.equal(everyone[0], row) for row in everyone)


def test_broadcast_named_parameters_list():
    model = make_model(seed=hvd.rank() + 7)
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=hvd.size() - 1)
    assert same_on_every_rank(model)
    reference = make_model(seed=hvd.size() - 1 + 7)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q)


def test_sync_batch_norm_matches_combined_batch():
    torch.manual_seed(0)
    x = torch.randn(3 * hvd.size(), 4, 5, dtype=torch.float64)
    w = torch.randn(3 * hvd.size(), 4, 5, dtype=torch.float64)
    sync = hvd.SyncBatchNorm(4).double()
    plain = nn.BatchNorm1d(4).double()
    mine = my_slice(x).clone().requires_grad_()
    everything = x.clone().requires_grad_()
    out = sync(mine)
    reference = plain(everything)
    (out * my_slice(w)).sum().backward()
    (reference * w).sum().backward()
    assert torch.allclose(out, my_slice(reference), atol=1e-8)
    assert torch.allclose(sync.running_mean, plain.running_mean)
    assert torch.allclose(sync.running_var, plain.running_var)
    assert torch.allclose(mine.grad, my_slice(everything.grad), atol=1e-8)
    # Parameter gradients are per rank; their sum over ranks is the combined one.
    total = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    assert torch.allclose(total, plain.weight.grad)


def test_sync_batch_norm_eval_uses_running_stats():
    sync = hvd.SyncBatchNorm(3).eval()
    x = torch.randn(2, 3)
    assert torch.allclose(sync(x), x / torch.sqrt(torch.tensor(1 + 1e-5)))


def test_join_with_uneven_batches():
    # Rank r runs r + 1 steps; a rank that has joined contributes zeros to the others' sums.
    for step in range(hvd.rank() + 1):
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="uneven.%d" % step)
        assert out.tolist() == [float(hvd.size() - step)] * 2
    assert hvd.join() == hvd.size() - 1


def local_gradients(model, x, y):
    """This rank's own gradients of the loss on its slice, without any collective."""
    reference = copy.deepcopy(model)
    F.mse_loss(reference(my_slice(x)), my_slice(y)).backward()
    return [p.grad.clone() for p in reference.parameters()]


def test_process_set_leaves_non_members_gradients_alone():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    members = list(range(hvd.size() - 1))  # the last rank is not a member
    subset = hvd.add_process_set(members)
    try:
        model = make_model(seed=hvd.rank())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       process_set=subset)
        x, y = global_batch(7)
        mine = local_gradients(model, x, y)
        everyone = [hvd.allgather(g.unsqueeze(0), name="local.%d" % i)
                    for i, g in enumerate(mine)]
        F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
        opt.synchronize()
        for p, g, gathered in zip(model.parameters(), mine, everyone):
            if subset.included():
                expected = gathered[members].mean(0)
            else:
                expected = g
            assert torch.allclose(p.grad, expected, rtol=1e-12, atol=1e-12)
        with opt.skip_synchronize():
            opt.step()
    finally:
        hvd.remove_process_set(subset)


@pytest.mark.parametrize("passes", [1, 2])
def test_sparse_gradients_without_sparse_as_dense(passes):
    torch.manual_seed(0)
    embedding = nn.Embedding(8, 3, sparse=True).double()
    reference = copy.deepcopy(embedding)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.5),
                                   named_parameters=embedding.named_parameters(),
                                   backward_passes_per_step=passes)
    expected = torch.zeros(8, 3, dtype=torch.float64)
    for micro in range(passes):
        # Rank r looks up r + 1 rows (some shared with other ranks, one twice).
        for r in range(hvd.size()):
            ids = torch.tensor([(r + micro + i) % 8 for i in range(r + 1)] + [r])
            w = torch.full((r + 2, 3), float(r + 1), dtype=torch.float64)
            if r == hvd.rank():
                (embedding(ids) * w).sum().backward()
            reference.zero_grad()
            (reference(ids) * w).sum().backward()
            expected += reference.weight.grad.to_dense() / hvd.size()
    assert embedding.weight.grad.is_sparse
    before = embedding.weight.detach().clone()
    opt.step()
    assert embedding.weight.grad.is_sparse
    assert torch.allclose(embedding.weight.grad.to_dense(), expected)
    assert torch.allclose(embedding.weight, before - 0.5 * expected)
    assert same_on_every_rank(embedding)


def test_broadcast_optimizer_state_creates_missing_state():
    # Fresh optimizers have no state: Horovod creates it (zero gradients, one step) and
    # broadcasts root's, hyperparameters included.
    model = make_model()
    root = hvd.size() - 1
    inner = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    for opt in (inner, hvd.DistributedOptimizer(
            torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1)),
            named_parameters=model.named_parameters())):
        before = [p.detach().clone() for p in model.parameters()]
        hvd.broadcast_optimizer_state(opt, root_rank=root)
        assert opt.param_groups[0]["lr"] == pytest.approx(0.01 * (root + 1))
        for p, q in zip(model.parameters(), before):
            state = opt.state[p]
            assert float(state["step"]) == 1.0
            assert torch.equal(state["exp_avg"], torch.zeros_like(p))
            assert torch.equal(p, q)  # a step on zero gradients moves no Adam parameter


def test_broadcast_optimizer_state_to_fresh_distributed_optimizers_only():
    # Root's optimizer has state, the others' are fresh DistributedOptimizers: creating their
    # state must step only the wrapped optimizer (no allreduce that root would never join).
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(8)
    F.mse_loss(model(my_slice(x)), my_slice(y)).backward()
    opt.step()
    root = 0
    if hvd.rank() != root:
        opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    averages = torch.cat([opt.state[p]["exp_avg"].reshape(-1) for p in model.parameters()])
    assert averages.abs().sum() > 0  # root's first moments, not the zeros of a fresh state
    everyone = hvd.allgather(averages.unsqueeze(0), name="fresh.exp_avg")
    assert all(torch.equal(everyone[0], row) for row in everyone)
