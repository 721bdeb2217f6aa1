"""DistributedOptimizer(op=hvd.Adasum): Adasum of each rank's parameter *delta*, as Horovod's
torch optimizer does (``_DistributedAdasumOptimizer``).

Once a parameter's gradient is accumulated, its hook runs the wrapped optimizer's step on that
parameter alone (so the step overlaps the rest of backward), keeps the parameter's value from
before the step, and starts the Adasum allreduce of delta = after - before. step() waits and
sets every parameter to before + Adasum(deltas). Combining deltas rather than gradients is what
makes Adasum right for optimizers whose step is not linear in the gradient (Adam, LAMB):
each rank's optimizer state (moments, step counts) follows its own gradients.
"""

import socket
from contextlib import contextmanager

import torch

from ronde import _core
from ronde.torch.compression import casting
from ronde.torch.mpi_ops import Adasum, allreduce_async_, synchronize as _synchronize_handle
from ronde.torch.optimizer_params import checked_named_parameters, register_gradient_hooks


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    _ronde_distributed = True  # broadcast_optimizer_state steps the wrapped optimizer alone

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 process_set):
        super(self.__class__, self).__init__(params)
        named_parameters = checked_named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.process_set = process_set
        self._starts = {}  # parameter -> its value before this step's local update
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        register_gradient_hooks(self)

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _local_step(self, p):
        """The wrapped optimizer's step on `p` alone: its param_groups are narrowed for the
        call, so state and hyperparameters stay those of p's own group."""
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _start_delta(self, p):
        """Steps p locally and starts the Adasum of its delta; p holds the delta meanwhile."""
        start = self._starts.get(p)
        if start is None:
            start = self._starts[p] = torch.empty_like(p, memory_format=torch.preserve_format)
        with torch.no_grad():
            start.copy_(p)
            self._local_step(p)  # a parameter without a gradient stays put: delta 0
            p.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum,
                                  process_set=self.process_set)
        return handle, (compressed, ctx)

    def _make_hook(self, p):
        def hook(*ignore):
            if not self.process_set.included():
                return  # this rank steps on its own gradients in step()
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._start_delta(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to wait for before step(): the local steps have run already (Horovod's
        Adasum optimizer does the same). Gradients changed now would not be applied."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("skip_synchronize() is not supported with op=Adasum: each "
                             "parameter's local step runs in its gradient hook, so "
                             "gradients changed after backward (clipping) are not applied")
        yield  # pragma: no cover (makes this a generator)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if not self.process_set.included():
            super(self.__class__, self).step()
            return loss
        # Parameters whose hook did not fire (no gradient here, or fewer backward passes than
        # backward_passes_per_step) still join every rank's Adasum, in the same order.
        missing = [p for p in self._requires_update if self._handles.get(p, (None,))[0] is None]
        for p in sorted(missing, key=lambda q: self._parameter_names[q]):
            self._handles[p] = self._start_delta(p)
        for p, (handle, (compressed, ctx)) in self._handles.items():
            delta = self._compression.decompress(_synchronize_handle(handle), ctx)
            with torch.no_grad():
                start = self._starts[p]
                start.add_(delta.to(start.dtype))
                p.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step(). This is prohibited as it can cause "
                                 "a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _is_power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def adasum_optimizer_class(optimizer, compression, process_set):
    """The class that wraps `optimizer` for op=Adasum, after the checks that need no peer."""
    if getattr(compression, "reducing", False):
        raise ValueError("op=Adasum combines whole parameter deltas: pass Compression.none, "
                         "fp16 or bf16, not %s" % type(compression).__name__)
    casting(compression)
    ranks = process_set.size()
    if not _is_power_of_two(ranks):
        raise ValueError("op=Adasum needs a power-of-two number of ranks, as Horovod's does: "
                         "rank %d on %s is in a set of %d" % (_core.rank(), socket.gethostname(),
                                                             ranks))
    return type(optimizer.__class__.__name__, (optimizer.__class__,),
                dict(_DistributedAdasumOptimizer.__dict__))
