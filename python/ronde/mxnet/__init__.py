"""Horovod's MXNet API on ronde: ``import ronde.mxnet as hvd``.

Collectives on NDArrays (CPU), DistributedOptimizer (wraps an mx.optimizer.Optimizer),
DistributedTrainer (a Gluon Trainer), broadcast_parameters. Runs on the same runtime as
ronde.torch (negotiation, fusion); the global process set only.
"""

import warnings

import mxnet as mx

from ronde import _core
from ronde.mxnet import mpi_ops as _mpi_ops
from ronde.mxnet.compression import Compression
from ronde.mxnet.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min,
                                 MismatchError, Product, RondeError, Sum, allgather, allreduce,
                                 allreduce_, alltoall, barrier, broadcast, broadcast_,
                                 grouped_allreduce, grouped_allreduce_)

size = _core.size
rank = _core.rank
local_size = _core.local_size
local_rank = _core.local_rank
cross_size = _core.cross_size
cross_rank = _core.cross_rank
is_initialized = _core.is_initialized


def init(comm=None):
    """Joins the job started by `ronde run` (Horovod's hvd.init). Does nothing until
    shutdown(), even when the runtime has stopped (see ronde.torch.init)."""
    if comm is not None and comm != []:
        raise ValueError("ronde.mxnet.init: an MPI communicator is not supported")
    _core.init()


def shutdown():
    _core.shutdown()
    _mpi_ops._reset_naming()


def _reduce_gradients(grads, name, compression, op, prescale, postscale):
    """Allreduces `grads` (NDArrays) in place as one fused group, through `compression`."""
    if not grads:
        return
    compressed = [compression.compress(g) for g in grads]
    outs = _mpi_ops.grouped_allreduce([c for c, _ in compressed], name=name, op=op,
                                      prescale_factor=prescale, postscale_factor=postscale)
    for g, out, (_, ctx) in zip(grads, outs, compressed):
        g[:] = compression.decompress(out, ctx)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Horovod's hvd.DistributedOptimizer for MXNet: update() averages the gradient over the
    ranks, then lets the wrapped optimizer apply it."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0):
        self._optimizer = optimizer
        self._gradient_predivide_factor = gradient_predivide_factor
        if num_groups:
            warnings.warn("ronde.mxnet fuses each update's gradients already; num_groups is "
                          "accepted and ignored")

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def __setattr__(self, name, value):
        # Trainer.step() sets rescale_grad (and init sets param_dict) on the optimizer it
        # holds: they belong to the wrapped one, which applies them.
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        if size() == 1:
            return
        indices = index if isinstance(index, (tuple, list)) else [index]
        grads = grad if isinstance(grad, (tuple, list)) else [grad]
        factor = self._gradient_predivide_factor
        _reduce_gradients(grads, "optimizer.%s" % ".".join(str(i) for i in indices),
                          Compression.none, Average, 1.0 / factor, factor)

    def update(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """Horovod's hvd.DistributedTrainer: a Gluon Trainer (no kvstore) whose gradients are
    summed over the ranks in one fused group per step, with the optimizer's rescale divided
    by the number of ranks (an average, as Horovod does it)."""

    def __init__(self, params, optimizer, optimizer_params=None,
                 compression=Compression.none, gradient_predivide_factor=1.0, prefix=None,
                 num_groups=0):
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer does not take DistributedOptimizer as its "
                          "optimizer. We have unwrapped it for you.")
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        # Trainer.step() sets rescale_grad from _scale: dividing here makes the sum an average.
        self._scale /= size()
        self._compression = compression
        self._gradient_predivide_factor = gradient_predivide_factor
        self._prefix = prefix or ""

    def _allreduce_grads(self):
        if size() == 1:
            return
        grads = [g for param in self._params if param.grad_req != "null"
                 for g in param.list_grad()]
        factor = self._gradient_predivide_factor
        _reduce_gradients(grads, self._prefix + "trainer", self._compression, Sum, 1.0 / factor,
                          factor)


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Horovod's hvd.broadcast_parameters: overwrites `params` with root_rank's. `params`: a
    dict of NDArrays (Module's arg_params), or Gluon's ParameterDict / a dict of Parameters;
    a Parameter whose initialization is deferred is broadcast right after it initializes."""
    if isinstance(params, dict) or hasattr(params, "items"):
        items = sorted(params.items())
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    prefix = prefix or ""
    for name, p in items:
        key = "parameter.%s%s" % (prefix, name)
        if isinstance(p, mx.nd.NDArray):
            broadcast_(p, root_rank, name=key)
        elif isinstance(p, mx.gluon.Parameter):
            try:
                arrays = p.list_data()
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(p, root_rank, key)
                continue
            for array in arrays:
                broadcast_(array, root_rank, name=key)
        else:
            raise ValueError("invalid parameter %r of type %s" % (name, type(p)))


def _broadcast_after_init(param, root_rank, key):
    original = param._init_impl

    def init_then_broadcast(*args, **kwargs):
        original(*args, **kwargs)
        for array in param.list_data():
            broadcast_(array, root_rank, name=key)
        param._init_impl = original
    param._init_impl = init_then_broadcast
