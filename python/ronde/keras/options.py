"""The options of Horovod's Keras DistributedOptimizer, checked once by Horovod's rules. Shared
by the Keras 3 optimizer (ronde.keras) and the Keras 2 one (ronde.tensorflow.keras on tf_keras),
so both refuse the same things with the same exception classes."""

import warnings

from ronde.common import compression as common_compression
from ronde.common import numpy_ops as nops


def resolve_groups(num_groups, groups):
    """Horovod's rule: `num_groups` is the deprecated spelling of an integer `groups`; `groups`
    is a positive integer or a list of lists of variables."""
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if isinstance(groups, bool) or not (isinstance(groups, list) or groups > 0):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "tf.Variable.")
    return groups


class ReductionOptions:
    """How a DistributedOptimizer reduces: op and scale factors, compression, sparse handling,
    explicit groups, the process set, local accumulation and the scaling of local gradients."""

    def __init__(self, name, compression, sparse_as_dense, gradient_predivide_factor, op,
                 backward_passes_per_step, average_aggregated_gradients, num_groups, groups,
                 process_set, scale_local_gradients):
        if op is None:
            op = nops.Average
        if op not in (nops.Average, nops.Sum, nops.Adasum):
            raise ValueError("op currently only supports Average and Sum (and ronde's Adasum)")
        if op == nops.Adasum:
            # Horovod refuses Adasum with Keras; ronde combines the gradients by it (see
            # docs/compression.md), on the world sizes its algorithm takes.
            if average_aggregated_gradients:
                raise ValueError("Adasum does not support average_aggregated_gradients == True")
            ranks = process_set.size()
            if ranks & (ranks - 1):
                raise ValueError("Adasum needs a power-of-two number of ranks, got %d" % ranks)
        if gradient_predivide_factor != 1.0 and op != nops.Average:
            # horovod.tensorflow.keras ignores the factor under Sum; refusing says so instead.
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be > 0, not %r"
                             % (backward_passes_per_step,))
        if common_compression.is_reducing(compression):
            raise ValueError("%s keeps per-tensor state and runs its own collectives; the Keras "
                             "DistributedOptimizer takes Compression.none, fp16 or bf16"
                             % type(compression).__name__)
        self.name = name
        self.compression = compression
        self.sparse_as_dense = bool(sparse_as_dense)
        self.op = op
        self.predivide = float(gradient_predivide_factor)
        self.passes = int(backward_passes_per_step)
        self.average_aggregated = bool(average_aggregated_gradients)
        self.groups = resolve_groups(num_groups, groups)
        self.process_set = process_set
        self.scale_local_gradients = bool(scale_local_gradients)

    @property
    def prescale(self):
        return 1.0 / self.predivide if self.op == nops.Average else 1.0

    @property
    def postscale(self):
        # Average is split around the sum: 1/f before, f/size after (the runtime divides).
        return self.predivide if self.op == nops.Average else 1.0
