"""Gradient compression around the gradient reduction (Horovod's Compression API, and more).

Two kinds of compressor share one interface, ``compress(tensor) -> (payload, ctx)`` and
``decompress(payload, ctx)``:

- *Casting* compressors (``none``, ``fp16``, ``bf16``) are Horovod's: stateless, the payload
  is allreduced as it is, so they work with every collective that takes ``compression=``.
- *Reducing* compressors (``topk(...)``, ``powersgd(...)``) keep per-tensor state (error
  feedback, PowerSGD's warm-started Q) and need a collective other than one allreduce of the
  payload (an allgather of values and indices; two allreduces with work in between). They
  are instances, made per DistributedOptimizer, and reduce through ``reduce_async``.
"""

import math

import torch


class Compressor:
    """Compresses a tensor before communication and restores it afterwards."""

    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16, halving the bytes on the wire."""
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16: half the bytes like fp16, float32's range
    (no overflow of large gradients), 8 bits of mantissa instead of 11."""
    wire_dtype = torch.bfloat16


class ReducingCompressor(Compressor):
    """A stateful compressor that runs its own collectives (see reduce_async).

    State is kept per tensor name; ranks must use the same names, as for any collective."""

    reducing = True

    def __init__(self):
        self.state = {}
        self.bytes_sent = 0  # payload bytes this rank handed to the collectives, for docs/tests

    def reduce_async(self, tensor, name, average, process_set):
        """Starts the compressed reduction of `tensor`; returns a handle with advance() (start
        the next round of communication, if any) and __call__() (the reduced tensor)."""
        raise NotImplementedError


class _Handle:
    """Horovod-style callable handle over a chain of rounds (generator of core handles)."""

    def __init__(self, rounds):
        self._rounds = rounds
        self._pending = next(rounds)
        self._result = None
        self._done = False

    def advance(self):
        if not self._done:
            from ronde.torch.mpi_ops import synchronize
            results = [synchronize(h) for h in self._pending]
            try:
                self._pending = self._rounds.send(results)
            except StopIteration as stop:
                self._result = stop.value
                self._done = True

    def __call__(self):
        while not self._done:
            self.advance()
        return self._result


class TopKCompressor(ReducingCompressor):
    """Top-k sparsification with error feedback: each rank sends the `ratio` share of entries
    of (gradient + residual) largest in magnitude, as values and int32 indices (allgathered),
    and keeps the rest as the residual for its next step. Tensors of fewer than `min_elements`
    entries (biases, norms: few bytes, and starved by a 1% selection) are allreduced whole.
    Beyond Horovod (Lin et al., Deep Gradient Compression, without momentum correction)."""

    def __init__(self, ratio=0.01, error_feedback=True, min_elements=1024):
        super().__init__()
        if not 0.0 < ratio <= 1.0:
            raise ValueError("topk: ratio must be in (0, 1], got %r" % (ratio,))
        self.ratio = ratio
        self.error_feedback = error_feedback
        self.min_elements = min_elements

    def k_for(self, numel):
        return max(1, int(math.ceil(self.ratio * numel)))

    def compress(self, tensor, name=None):
        flat = tensor.reshape(-1)
        residual = self.state.get(name)
        accumulated = flat + residual if residual is not None else flat.clone()
        k = self.k_for(flat.numel())
        _, indices = torch.topk(accumulated.abs(), k, sorted=False)
        values = accumulated[indices]
        if self.error_feedback:
            accumulated[indices] = 0
            self.state[name] = accumulated
        index_dtype = torch.int32 if flat.numel() < 2**31 else torch.int64
        return (values.contiguous(), indices.to(index_dtype)), (tensor.shape, flat.numel())

    @staticmethod
    def decompress(payload, ctx, divisor=1):
        values, indices = payload
        shape, numel = ctx
        out = torch.zeros(numel, dtype=values.dtype, device=values.device)
        out.index_add_(0, indices.long(), values)  # indices chosen by several ranks add up
        if divisor != 1:
            out /= divisor
        return out.reshape(shape)

    def reduce_async(self, tensor, name, average, process_set):
        from ronde.torch.mpi_ops import allgather_async
        if tensor.numel() < self.min_elements:
            return _dense(self, tensor, name, average, process_set)

        def rounds():
            payload, ctx = self.compress(tensor, name)
            values, indices = payload
            self.bytes_sent += values.numel() * values.element_size() + \
                indices.numel() * indices.element_size()
            gathered = yield [allgather_async(values, "topk.values." + name, process_set),
                              allgather_async(indices, "topk.indices." + name, process_set)]
            divisor = process_set.size() if average else 1
            return self.decompress(tuple(gathered), ctx, divisor)
        return _Handle(rounds())


def _dense(compressor, tensor, name, average, process_set):
    """The uncompressed allreduce of a tensor a reducing compressor leaves alone."""
    from ronde.torch.mpi_ops import Average, Sum, allreduce_async

    def rounds():
        compressor.bytes_sent += tensor.numel() * tensor.element_size()
        reduced = yield [allreduce_async(tensor, name="dense." + name,
                                         op=Average if average else Sum,
                                         process_set=process_set)]
        return reduced[0]
    return _Handle(rounds())


def orthogonalize(matrix, eps=1e-8):
    """Gram-Schmidt on the columns of `matrix`, in place (PowerSGD's orthogonalisation)."""
    for i in range(matrix.shape[1]):
        column = matrix[:, i]
        column /= column.norm() + eps
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest -= torch.outer(column, column @ rest)
    return matrix


class PowerSGDCompressor(ReducingCompressor):
    """PowerSGD (Vogels et al., 2019): a gradient reshaped to an n x m matrix M (plus the
    residual of the last step) is sent as rank-r factors. P = M Q is averaged over the ranks
    and orthogonalised, Q = M^T P is averaged, and the step uses P Q^T; the residual M - P Q^T
    stays on this rank (error feedback) and Q warm-starts the next step. Tensors with fewer
    than two dimensions, or whose factors would not be smaller, are allreduced uncompressed,
    as torch DDP's PowerSGD hook does."""

    def __init__(self, rank=4, error_feedback=True, warm_start=True, seed=0):
        super().__init__()
        if rank < 1:
            raise ValueError("powersgd: rank must be >= 1, got %r" % (rank,))
        self.rank = rank
        self.error_feedback = error_feedback
        self.warm_start = warm_start
        self.seed = seed

    def compresses(self, tensor):
        if tensor.dim() < 2 or not tensor.dtype.is_floating_point:
            return False
        n, m = tensor.shape[0], tensor.numel() // tensor.shape[0]
        r = min(self.rank, n, m)
        return r * (n + m) < n * m

    def initial_q(self, name, m, r, dtype):
        """The starting Q, the same on every rank: a seeded normal draw (seed and name)."""
        seed = (self.seed * 1000003 + sum((i + 1) * ord(c) for i, c in enumerate(name))) % 2**62
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(m, r, generator=generator, dtype=torch.float64).to(dtype)

    def reduce_async(self, tensor, name, average, process_set):
        from ronde.torch.mpi_ops import Average, Sum, allreduce_async
        op = Average if average else Sum
        if not self.compresses(tensor):
            return _dense(self, tensor, name, average, process_set)

        def rounds():
            n = tensor.shape[0]
            matrix = tensor.reshape(n, -1)
            m = matrix.shape[1]
            r = min(self.rank, n, m)
            state = self.state.setdefault(name, {})
            if self.error_feedback and "error" in state:
                matrix = matrix + state["error"]
            q = state.get("q") if self.warm_start else None
            if q is None:
                q = self.initial_q(name, m, r, matrix.dtype)
            p = matrix @ q
            self.bytes_sent += (p.numel() + q.numel()) * p.element_size()
            (p,) = yield [allreduce_async(p, name="powersgd.p." + name, op=op,
                                          process_set=process_set)]
            orthogonalize(p)  # scale-free: op=Sum gets its factor size back through Q
            q = matrix.t() @ p
            (q,) = yield [allreduce_async(q, name="powersgd.q." + name, op=op,
                                          process_set=process_set)]
            approximation = p @ q.t()
            if self.error_feedback:
                state["error"] = matrix - approximation
            state["q"] = q
            return approximation.reshape(tensor.shape)
        return _Handle(rounds())


class Compression:
    """Horovod's Compression namespace, with bf16 and two reducing compressors.

    none, fp16, bf16: pass as `compression=` anywhere. topk(ratio) and powersgd(rank) make a
    fresh stateful compressor for one DistributedOptimizer (`compression=` there only)."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def topk(ratio=0.01, error_feedback=True, min_elements=1024):
        return TopKCompressor(ratio, error_feedback, min_elements)

    @staticmethod
    def powersgd(rank=4, error_feedback=True, warm_start=True, seed=0):
        return PowerSGDCompressor(rank, error_feedback, warm_start, seed)


def is_reducing(compression):
    return getattr(compression, "reducing", False)


def casting(compression):
    """`compression` (default none) for a single collective: a casting compressor only."""
    if compression is None:
        return NoneCompressor
    if is_reducing(compression):
        raise ValueError("%s keeps per-tensor state and runs its own collectives: pass it to "
                         "DistributedOptimizer(compression=...), not to one collective"
                         % type(compression).__name__)
    return compression
