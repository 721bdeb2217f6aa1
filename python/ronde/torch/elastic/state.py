"""Elastic states for PyTorch: Horovod's ``TorchState`` (model, optimizer, sampler, and any
picklable attribute) on ronde's collectives."""

import copy

import torch

from ronde.common import elastic as _common
from ronde.torch import functions as _functions
from ronde.torch import mpi_ops as _mpi_ops


def _allreduce_max(value):
    tensor = torch.tensor([int(value)], dtype=torch.int64)
    return int(_mpi_ops.allreduce(tensor, op=_mpi_ops.Max, name="elastic.max").item())


def _init():
    import ronde.torch as hvd
    hvd.init()


def _shutdown():
    import ronde.torch as hvd
    hvd.shutdown()


def collectives():
    """ronde.torch's collectives for ronde.common.elastic."""
    from ronde import _core
    return _common.Collectives(
        broadcast_object=lambda obj, root: _functions.broadcast_object(obj, root,
                                                                       name="elastic.state"),
        allgather_object=lambda obj: _functions.allgather_object(obj, name="elastic.gather"),
        allreduce_max=_allreduce_max, rank=_core.rank, size=_core.size, init=_init,
        shutdown=_shutdown)


class State(_common.State):
    """Horovod's ``hvd.elastic.State`` over ronde.torch: subclass it and implement save(),
    restore() and sync()."""

    def __init__(self):
        super().__init__(collectives())


class ObjectState(_common.ObjectState):
    """Horovod's ``hvd.elastic.ObjectState``: picklable keyword attributes."""

    def __init__(self, **kwargs):
        super().__init__(collectives(), **kwargs)


class _ModelHandler:
    def __init__(self, model):
        self.value = model
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        _functions.broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler:
    def __init__(self, optimizer):
        self.value = optimizer
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        _functions.broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler:
    def __init__(self, sampler):
        self.value = sampler
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self, root, own_commit, roots_commit):
        # The processed indices of every rank that holds the root's commit (Horovod's union,
        # for scripts that record only their own indices), then the root's epoch: a new worker
        # starts where the others are. A survivor that reached a later commit alone took
        # samples in steps the root rolls back: they are processed again, not skipped.
        state = self.value.state_dict()
        processed = set()
        for their_commit, indices in _functions.allgather_object(
                (own_commit, state["processed_indices"]), name="elastic.sampler"):
            if their_commit == roots_commit:
                processed.update(indices)
        state["processed_indices"] = processed
        self.value.load_state_dict(_functions.broadcast_object(state, root,
                                                               name="elastic.sampler"))


def _handler_for(value):
    from ronde.torch.elastic.sampler import ElasticSampler
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(_common.ObjectState):
    """Horovod's ``hvd.elastic.TorchState(model=None, optimizer=None, **kwargs)``: the model's
    and optimizer's state_dicts, ElasticSamplers and picklable attributes, committed
    together. sync() gives every rank the state of the lowest rank that holds one (a
    survivor), optimizer first, so a fresh optimizer's first local step cannot move
    parameters that the model's broadcast then fixes."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handlers = {}
        plain = {}
        everything = dict(kwargs)
        everything.update(model=model, optimizer=optimizer)
        for name, value in everything.items():
            handler = _handler_for(value) if value is not None else None
            if handler is not None:
                handlers[name] = handler
            elif name not in ("model", "optimizer"):
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(collectives(), **plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].value = value
        super().__setattr__(name, value)

    def _ordered(self):
        # Optimizers before models: see the class docstring.
        return sorted(self._handlers.values(), key=lambda h: not isinstance(h, _OptimizerHandler))

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        root = self.sync_root()
        # The root's commit, which the sampler's merge keeps to.
        roots_commit = self._collectives.broadcast_object(self._commit_id, root)
        for handler in self._ordered():
            if isinstance(handler, _SamplerHandler):
                handler.sync(root, self._commit_id, roots_commit)
            else:
                handler.sync(root)
        super().sync(root)
        # A synced state is the new commit: a failure before the next commit returns here.
        self.save()
