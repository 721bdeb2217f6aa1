"""DistributedOptimizer: averages gradients across ranks while backward is still running.

A hook that runs once a parameter's gradient is accumulated starts that gradient's allreduce
while backward goes on; step() (or synchronize()) waits for all of them, then lets the wrapped
optimizer update the parameters. Sparse gradients are allgathered (sparse_allreduce_async)
unless sparse_as_dense; a rank outside the process set keeps its own gradients.
"""

import warnings
from contextlib import contextmanager

import torch

from ronde import _core
from ronde.common.elastic import driver_view
from ronde.torch.compression import Compression, is_reducing
from ronde.torch.mpi_ops import (Adasum, Average, Sum, allreduce_async_, grouped_allreduce_async_,
                                 synchronize as _synchronize_handle)
from ronde.torch.optimizer_adasum import adasum_optimizer_class
from ronde.torch.optimizer_params import checked_named_parameters, register_gradient_hooks
from ronde.torch.process_sets import global_process_set
from ronde.torch.sparse_ops import sparse_allreduce_async


# The context of a gradient that a reducing compressor (top-k, PowerSGD) has already restored.
_RESTORED = object()


class _Calls:
    """A group's handles (reducing compressors) behaving as one callable handle."""

    def __init__(self, handles):
        self.handles = handles

    def advance(self):
        for h in self.handles:
            h.advance()

    def __call__(self):
        return [h() for h in self.handles]


class _DistributedOptimizer(torch.optim.Optimizer):
    _ronde_distributed = True  # broadcast_optimizer_state steps the wrapped optimizer alone

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression

        named_parameters = checked_named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        # Groups: lists of parameters reduced together as one fused, negotiated group.
        self._p_to_group = {}
        self._group_counts = {}
        if groups is not None:
            if isinstance(groups, int):
                ordered = [v for group in self.param_groups for v in group["params"]
                           if v.requires_grad]
                size = max(1, -(-len(ordered) // max(groups, 1)))
                group_list = [ordered[i:i + size] for i in range(0, len(ordered), size)]
            else:
                group_list = [list(g) for g in groups]
            for group in group_list:
                key = tuple(group)
                self._group_counts[key] = 0
                for p in group:
                    self._p_to_group[p] = key
        self._sparse_seen = set()  # parameters whose gradient has been sparse
        # With sparse_as_dense: parameters whose sparse gradient is reduced dense this step,
        # and made sparse again before the wrapped optimizer's step (SparseAdam takes no other).
        self._densified = set()

        # One rank has nothing to reduce, unless it is an elastic world that may grow: the
        # optimizer outlives the reset, and its gradients must then be reduced (Horovod
        # registers the hooks when HOROVOD_ELASTIC=1).
        if _core.size() > 1 or driver_view() is not None:
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._densified = set()
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        register_gradient_hooks(self)

    def _scaling(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _gradient(self, p):
        if p.grad is None:
            # Not computed here (dynamic graph), but other ranks may have: contribute zeros,
            # sparse ones where this parameter's gradient has been sparse before.
            p.grad = torch.zeros_like(p)
            if p in self._sparse_seen:
                if not self.sparse_as_dense:
                    p.grad = p.grad.to_sparse()
                else:
                    self._densified.add(p)
        tensor = p.grad
        if tensor.is_sparse:
            self._sparse_seen.add(p)
            if self.sparse_as_dense:
                # Reduced in place in this dense copy; _store makes it sparse again.
                tensor = tensor.to_dense()
                p.grad = tensor
                self._densified.add(p)
            elif p in self._p_to_group:
                raise NotImplementedError("grouped allreduce of sparse gradients is not "
                                          "supported; use sparse_as_dense=True")
        return tensor

    def _allreduce_grad_async(self, p):
        gradient = self._gradient(p)
        if gradient.is_sparse:
            # Horovod's sparse path: indices and values allgathered, no compression.
            handle = sparse_allreduce_async(gradient, name=self._parameter_names.get(p),
                                            op=self.op, process_set=self.process_set)
            return handle, (gradient, None)
        if is_reducing(self._compression):
            handle = self._compression.reduce_async(gradient, self._parameter_names.get(p),
                                                    self.op == Average, self.process_set)
            return handle, (gradient, _RESTORED)
        compressed, ctx = self._compression.compress(gradient)
        prescale, postscale = self._scaling()
        handle = allreduce_async_(compressed, name=self._parameter_names.get(p), op=self.op,
                                  prescale_factor=prescale, postscale_factor=postscale,
                                  process_set=self.process_set)
        return handle, (compressed, ctx)

    def _grouped_allreduce_grad_async(self, params):
        if is_reducing(self._compression):
            handles = [self._allreduce_grad_async(p) for p in params]
            return _Calls([h for h, _ in handles]), [ctx for _, ctx in handles]
        compressed = [self._compression.compress(self._gradient(p)) for p in params]
        prescale, postscale = self._scaling()
        name = "group." + self._parameter_names.get(params[0])
        handle = grouped_allreduce_async_([c for c, _ in compressed], name=name, op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self.process_set)
        return handle, compressed

    def _make_hook(self, p):
        def hook(*ignore):
            if not self.process_set.included():
                return  # this rank's gradients are its own: nothing to reduce
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                group = self._p_to_group.get(p)
                if group is None:
                    handle, ctx = self._allreduce_grad_async(p)
                else:
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        for member in group:
                            self._handles.pop(member, None)
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        self._group_counts[group] = 0
                        return
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce and writes the averages into p.grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in sorted(self._requires_update - done, key=lambda q: self._parameter_names[q]):
            group = self._p_to_group.get(p)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # Groups that some member never reached (or that were partly submitted).
        for group in self._group_counts:
            if group not in self._handles and any(p in self._requires_update for p in group):
                for member in group:
                    self._handles.pop(member, None)
                self._handles[group] = self._grouped_allreduce_grad_async(group)
                self._group_counts[group] = 0
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)

        # Multi-round compressors: finish every tensor's first round before waiting on any
        # second one, so that all tensors' rounds travel in the same cycles.
        for handle, _ in self._handles.values():
            if hasattr(handle, "advance"):
                handle.advance()
        for key, (handle, ctx) in self._handles.items():
            outputs = _synchronize_handle(handle)
            if isinstance(key, tuple):
                for p, output, (_, context) in zip(key, outputs, ctx):
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    self._store(p, output, context)
            else:
                self._allreduce_delay[key] = self.backward_passes_per_step
                self._store(key, outputs, ctx[1])
        self._handles.clear()
        self._synchronized = True

    def _store(self, p, output, context):
        if output.is_sparse:
            p.grad = output
            return
        if context is _RESTORED:
            reduced = output
        else:
            reduced = self._compression.decompress(output, context)
        if reduced.data_ptr() != p.grad.data_ptr():
            p.grad.copy_(reduced)
        if p in self._densified:
            # Horovod's sparse_as_dense: "convert back to sparse before applying the update".
            self._densified.discard(p)
            p.grad = p.grad.to_sparse()

    @contextmanager
    def skip_synchronize(self):
        """Within this context step() does not synchronize: use after calling synchronize()
        yourself (e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients averaged over all ranks.

    named_parameters: model.named_parameters(), naming each gradient's allreduce (unique).
    compression: the gradients on the wire: Compression.none, fp16 or bf16 (cast), or a fresh
    Compression.topk(ratio) / Compression.powersgd(rank) (stateful, with error feedback).
    backward_passes_per_step: local accumulation passes before each allreduce.
    op: Average (default), Sum, or Adasum. With Adasum (and more than one rank), as in
    Horovod, each rank's optimizer steps on its own gradients and the parameter deltas are
    combined by Adasum (ronde.torch.optimizer_adasum); groups, gradient_predivide_factor and
    sparse gradients do not apply there. gradient_predivide_factor: with Average, divide by
    this before the sum and by size/factor after. groups: an int (that many groups) or lists
    of parameters, each reduced together as one group.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum and _core.size() > 1:
        if groups is not None or num_groups != 0:
            raise ValueError("op=Adasum reduces each parameter's delta on its own: groups "
                             "and num_groups are not supported with it")
        cls = adasum_optimizer_class(optimizer, compression, process_set)
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step, process_set)
    if is_reducing(compression) and op not in (Average, Sum):
        raise ValueError("compression=%s supports op=Average and op=Sum only"
                         % type(compression).__name__)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of lists of "
                         "torch.Tensor.")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
