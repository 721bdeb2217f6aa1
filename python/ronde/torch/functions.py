"""Helpers built on the collectives: parameters, optimizer state and arbitrary objects."""

import io
import pickle

import torch

from ronde._core import rank
from ronde.torch.mpi_ops import (_next_number, allgather, broadcast_, broadcast_async_,
                                 synchronize)
from ronde.torch.process_sets import global_process_set


def _object_tag(name, process_set=global_process_set):
    # Unnamed objects are numbered, not named by type: a non-root rank often passes None. The
    # numbers restart with every init, as the collectives' do.
    if name:
        return "object." + name
    return "object.noname.set%d.%d" % (process_set.process_set_id,
                                       _next_number("object", process_set))


def broadcast_parameters(params, root_rank, prefix=None, process_set=global_process_set):
    """Overwrites every tensor in `params` (a state_dict or named_parameters()) in place with
    root_rank's value (a global rank, also in a process set). Typically called once after model
    creation or a checkpoint load."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        params = list(params)
        if params and not isinstance(params[0], tuple):
            params = [(None, p) for p in params]
    handles = []
    for name, p in params:
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: %r is not a tensor" % (name,))
        if name is not None and prefix is not None:
            name = prefix + name
        with torch.no_grad():
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            None if name is None else "param." + name,
                                            process_set))
    for handle in handles:
        synchronize(handle)


def _create_state(optimizer):
    """Horovod's way to give a fresh optimizer its state: zero gradients and one local step.
    A DistributedOptimizer steps as its wrapped optimizer, so no collective runs (the other
    ranks may not be stepping)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p not in optimizer.state:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_ronde_distributed", False):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter buffers) equal to
    root_rank's. An optimizer with no state yet gets it first from a step on zero gradients,
    as in Horovod. root_rank is a global rank, also in a process set."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _create_state(optimizer)
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None,
                             root_rank, name="optimizer_state", process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (any picklable object) on every rank. root_rank is a global
    rank, also in a process set (as in Horovod)."""
    tag = _object_tag(name, process_set)
    if rank() == root_rank:
        buffer = io.BytesIO()
        torch.save(obj, buffer, pickle_module=pickle)
        payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(length, root_rank, tag + ".length", process_set)
        broadcast_(payload, root_rank, tag + ".data", process_set)
        return obj
    length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, tag + ".length", process_set)
    payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, tag + ".data", process_set)
    return torch.load(io.BytesIO(payload.numpy().tobytes()), pickle_module=pickle)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (any picklable object), in rank order."""
    tag = _object_tag(name, process_set)
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_module=pickle)
    payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64), tag + ".length",
                        process_set).tolist()
    gathered = allgather(payload, tag + ".data", process_set).numpy().tobytes()
    objects, offset = [], 0
    for length in lengths:
        objects.append(torch.load(io.BytesIO(gathered[offset:offset + length]),
                                  pickle_module=pickle))
        offset += length
    return objects
