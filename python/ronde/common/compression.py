"""Gradient compressors written once for every frontend (Horovod's Compression API, and more).

One interface, ``compress(tensor) -> (payload, ctx)`` and ``decompress(payload, ctx)``. The
algorithms here never touch a framework: each frontend passes a `TensorOps` that adapts its
tensors (dtype, casts, selection, scatter), and for the reducing compressors a `Collectives`
that starts its allreduce/allgather.

- *Casting* compressors (``none``, ``fp16``, ``bf16``; `casting_compressors`) are Horovod's:
  stateless classes with static-style methods; the payload is allreduced as it is.
- *Reducing* compressors (`TopKCompressor`, `PowerSGDCompressor`) keep per-tensor state (error
  feedback, PowerSGD's warm-started Q) and run their own rounds of collectives through
  `reduce_async`. They need an array type with numpy's operators and views (torch, numpy).
"""

import math

import numpy as np


class TensorOps:
    """A framework's tensors as the compressors see them. Casting needs the first four."""

    def dtype(self, tensor):
        raise NotImplementedError

    def is_floating(self, dtype) -> bool:
        raise NotImplementedError

    def wire_dtype(self, name):
        """The framework's dtype for "float16" / "bfloat16"; ValueError when it has none."""
        raise NotImplementedError

    def cast(self, tensor, dtype):
        raise NotImplementedError

    # For the reducing compressors.
    def flat_copy(self, tensor):
        """A contiguous 1-D copy of `tensor`."""
        raise NotImplementedError

    def largest_magnitudes(self, flat, k):
        """Indices (any order) of the k entries of `flat` largest in absolute value."""
        raise NotImplementedError

    def index_array(self, indices, numel):
        """`indices` in the narrowest integer type that addresses `numel` entries."""
        raise NotImplementedError

    def scatter_add(self, numel, indices, values):
        """A zero vector of `numel` entries with `values` added at `indices` (repeats add)."""
        raise NotImplementedError

    def outer(self, a, b):
        raise NotImplementedError

    def norm(self, vector):
        raise NotImplementedError

    def from_numpy(self, array, dtype):
        raise NotImplementedError

    def nbytes(self, tensor) -> int:
        raise NotImplementedError


class Collectives:
    """What a reducing compressor starts on the wire. Each start returns a handle; `wait`
    returns its result. Names must agree across ranks, as for any collective."""

    def allreduce(self, tensor, name, average, process_set):
        raise NotImplementedError

    def allgather(self, tensor, name, process_set):
        raise NotImplementedError

    def wait(self, handle):
        raise NotImplementedError


class Compressor:
    """Compresses a tensor before communication and restores it afterwards."""

    @staticmethod
    def compress(tensor):
        """Returns (payload, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class CastCompressor(Compressor):
    """Sends floating-point tensors as `wire` (a dtype name) and casts the result back; other
    tensors go as they are. Subclasses set `ops` and `wire`."""

    ops = None
    wire = None

    @classmethod
    def compress(cls, tensor):
        dtype = cls.ops.dtype(tensor)
        wire = cls.ops.wire_dtype(cls.wire)
        if cls.ops.is_floating(dtype) and dtype != wire:
            return cls.ops.cast(tensor, wire), dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.ops.cast(tensor, ctx)


_CAST_DOCS = {
    "float16": "Sends floating-point tensors as float16, halving the bytes on the wire.",
    "bfloat16": "Sends floating-point tensors as bfloat16: half the bytes like fp16, float32's "
                "range (no overflow of large gradients), 8 bits of mantissa instead of 11.",
}


def cast_compressor(ops, wire, name):
    """A CastCompressor class named `name` sending `wire` through `ops`."""
    return type(name, (CastCompressor,), {"ops": ops, "wire": wire, "__doc__": _CAST_DOCS[wire]})


class _Handle:
    """Horovod-style callable handle over a chain of rounds: a generator that yields the
    handles of one round and is sent their results."""

    def __init__(self, rounds, collectives):
        self._rounds = rounds
        self._collectives = collectives
        self._pending = next(rounds)
        self._result = None
        self._done = False

    def advance(self):
        """Waits for this round and starts the next one, if any."""
        if not self._done:
            results = [self._collectives.wait(h) for h in self._pending]
            try:
                self._pending = self._rounds.send(results)
            except StopIteration as stop:
                self._result = stop.value
                self._done = True

    def __call__(self):
        while not self._done:
            self.advance()
        return self._result


class ReducingCompressor(Compressor):
    """A stateful compressor that runs its own collectives (see reduce_async). State is kept
    per tensor name; ranks must use the same names, as for any collective."""

    reducing = True

    def __init__(self, ops, collectives):
        self.ops = ops
        self.collectives = collectives
        self.state = {}
        self.bytes_sent = 0  # payload bytes this rank handed to the collectives, for docs/tests

    def reduce_async(self, tensor, name, average, process_set):
        """Starts the compressed reduction of `tensor`; returns a handle with advance() (start
        the next round of communication, if any) and __call__() (the reduced tensor)."""
        raise NotImplementedError

    def _dense(self, tensor, name, average, process_set):
        """The uncompressed allreduce of a tensor this compressor leaves alone."""
        def rounds():
            self.bytes_sent += self.ops.nbytes(tensor)
            reduced = yield [self.collectives.allreduce(tensor, "dense." + name, average,
                                                        process_set)]
            return reduced[0]
        return _Handle(rounds(), self.collectives)


class TopKCompressor(ReducingCompressor):
    """Top-k sparsification with error feedback: each rank sends the `ratio` share of entries
    of (gradient + residual) largest in magnitude, as values and int32 indices (allgathered),
    and keeps the rest as the residual for its next step. Tensors of fewer than `min_elements`
    entries (biases, norms: few bytes, and starved by a 1% selection) are allreduced whole.
    Beyond Horovod (Lin et al., Deep Gradient Compression, without momentum correction)."""

    def __init__(self, ops, collectives, ratio=0.01, error_feedback=True, min_elements=1024):
        super().__init__(ops, collectives)
        if not 0.0 < ratio <= 1.0:
            raise ValueError("topk: ratio must be in (0, 1], got %r" % (ratio,))
        self.ratio = ratio
        self.error_feedback = error_feedback
        self.min_elements = min_elements

    def k_for(self, numel):
        return max(1, int(math.ceil(self.ratio * numel)))

    def compress(self, tensor, name=None):
        accumulated = self.ops.flat_copy(tensor)
        numel = accumulated.shape[0]
        residual = self.state.get(name)
        if residual is not None:
            accumulated += residual
        indices = self.ops.largest_magnitudes(accumulated, self.k_for(numel))
        values = accumulated[indices]
        if self.error_feedback:
            accumulated[indices] = 0
            self.state[name] = accumulated
        return (values, self.ops.index_array(indices, numel)), (tensor.shape, numel)

    def decompress(self, payload, ctx, divisor=1):
        values, indices = payload
        shape, numel = ctx
        out = self.ops.scatter_add(numel, indices, values)  # indices of several ranks add up
        if divisor != 1:
            out /= divisor
        return out.reshape(shape)

    def reduce_async(self, tensor, name, average, process_set):
        if math.prod(tensor.shape) < self.min_elements:
            return self._dense(tensor, name, average, process_set)

        def rounds():
            (values, indices), ctx = self.compress(tensor, name)
            self.bytes_sent += self.ops.nbytes(values) + self.ops.nbytes(indices)
            gathered = yield [self.collectives.allgather(values, "topk.values." + name,
                                                         process_set),
                              self.collectives.allgather(indices, "topk.indices." + name,
                                                         process_set)]
            divisor = process_set.size() if average else 1
            return self.decompress(tuple(gathered), ctx, divisor)
        return _Handle(rounds(), self.collectives)


def orthogonalize(ops, matrix, eps=1e-8):
    """Gram-Schmidt on the columns of `matrix`, in place (PowerSGD's orthogonalisation)."""
    for i in range(matrix.shape[1]):
        column = matrix[:, i]
        column /= ops.norm(column) + eps
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest -= ops.outer(column, column @ rest)
    return matrix


class PowerSGDCompressor(ReducingCompressor):
    """PowerSGD (Vogels et al., 2019): a gradient reshaped to an n x m matrix M (plus the
    residual of the last step) is sent as rank-r factors. P = M Q is averaged over the ranks
    and orthogonalised, Q = M^T P is averaged, and the step uses P Q^T; the residual M - P Q^T
    stays on this rank (error feedback) and Q warm-starts the next step. Tensors with fewer
    than two dimensions, or whose factors would not be smaller, are allreduced uncompressed,
    as torch DDP's PowerSGD hook does."""

    def __init__(self, ops, collectives, rank=4, error_feedback=True, warm_start=True, seed=0):
        super().__init__(ops, collectives)
        if rank < 1:
            raise ValueError("powersgd: rank must be >= 1, got %r" % (rank,))
        self.rank = rank
        self.error_feedback = error_feedback
        self.warm_start = warm_start
        self.seed = seed

    def compresses(self, tensor):
        if len(tensor.shape) < 2 or not self.ops.is_floating(self.ops.dtype(tensor)):
            return False
        n, m = tensor.shape[0], math.prod(tensor.shape) // tensor.shape[0]
        r = min(self.rank, n, m)
        return r * (n + m) < n * m

    def initial_q(self, name, m, r, dtype):
        """The starting Q, the same on every rank: a normal draw seeded by seed and name."""
        seed = (self.seed * 1000003 + sum((i + 1) * ord(c) for i, c in enumerate(name))) % 2**62
        draw = np.random.default_rng(seed).standard_normal((m, r))
        return self.ops.from_numpy(draw, dtype)

    def reduce_async(self, tensor, name, average, process_set):
        if not self.compresses(tensor):
            return self._dense(tensor, name, average, process_set)

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
                q = self.initial_q(name, m, r, self.ops.dtype(matrix))
            p = matrix @ q
            self.bytes_sent += self.ops.nbytes(p) + self.ops.nbytes(q)
            (p,) = yield [self.collectives.allreduce(p, "powersgd.p." + name, average,
                                                     process_set)]
            orthogonalize(self.ops, p)  # scale-free: a sum gets its factor back through Q
            q = matrix.T @ p
            (q,) = yield [self.collectives.allreduce(q, "powersgd.q." + name, average,
                                                     process_set)]
            approximation = p @ q.T
            if self.error_feedback:
                state["error"] = matrix - approximation
            state["q"] = q
            return approximation.reshape(tensor.shape)
        return _Handle(rounds(), self.collectives)


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
