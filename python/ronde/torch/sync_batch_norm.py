"""SyncBatchNorm: batch normalization with statistics over the whole global batch."""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ronde.torch.mpi_ops import Sum, allreduce
from ronde.torch.process_sets import global_process_set


class SyncBatchNorm(_BatchNorm):
    """Applies batch normalization over an N-D input, with mean and variance computed over
    the batches of every rank of `process_set` during training. Gradients flow through the
    cross-rank reduction (allreduce is differentiable), so backward is exact."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum,
                            self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)

        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        count = torch.full((1,), input.numel() // channels, dtype=input.dtype)
        local = torch.cat([input.sum(dims), (input * input).sum(dims), count])
        total = allreduce(local, op=Sum, name=None, process_set=self.process_set)
        n = total[-1]
        mean = total[:channels] / n
        var = total[channels:2 * channels] / n - mean * mean

        if self.training and self.track_running_stats:
            momentum = self.momentum
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
            with torch.no_grad():
                unbiased = var * (n / torch.clamp(n - 1, min=1))
                self.running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach() * momentum)

        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
