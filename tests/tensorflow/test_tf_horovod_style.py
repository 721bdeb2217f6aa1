"""ronde.tensorflow as Horovod's own TensorFlow suite drives it: every collective x dtype in
each mode (eager, tf.function, a TF1 graph in a session), the gradients of every op in every
mode, and the error cases with Horovod's tf.errors classes, each followed by a collective
that must still work. Like Horovod's suite, every test ends with a barrier and a shutdown,
and the next one starts with init (conftest's `aligned`).

References are computed here in numpy from what every rank contributes (each rank's input
is a known function of its rank)."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd
from modes import MODES, failure_class, gradient, run

ALL = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
       tf.float32, tf.float64, tf.bool]
NUMERIC = [d for d in ALL if d != tf.bool]
FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.fixture(autouse=True)
def horovod_cycle():
    yield
    hvd.barrier()
    hvd.shutdown()


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


def dtype_id(d):
    return d.name


def values(rank, shape, dtype):
    """Rank `rank`'s input: small non-negative integers (exact in every dtype, no overflow in
    sums over 4 ranks), as numpy of the dtype's numpy type (bool: alternating)."""
    count = int(np.prod(shape))
    base = (np.arange(count) * 3 + rank * 5) % 7
    if dtype == tf.bool:
        return (base % 2 == 1).reshape(shape)
    return base.reshape(shape).astype(np.float64)


def as_reference(array, dtype):
    """What `array` (float64 or bool) is after a round trip through `dtype`."""
    if dtype == tf.bool:
        return np.asarray(array, bool)
    return tf.cast(tf.constant(array, tf.float64), dtype).numpy().astype(np.float64)


def tolerance(dtype, op):
    """Half floats round at each step; an average of floats is a sum times 1/n, which is not
    exact when n is not a power of two; the rest is exact."""
    if dtype in (tf.float16, tf.bfloat16):
        return 0.02
    if op == "Average" and dtype.is_floating:
        return 1e-6 if dtype == tf.float32 else 1e-12
    return 0


# --- allreduce -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average", "Min", "Max", "Product"])
def test_allreduce(dtype, op, mode):
    n, r = hvd.size(), hvd.rank()
    shape = (3, 4)
    every = np.stack([values(k, shape, dtype) for k in range(n)])
    reduce = {"Sum": np.sum, "Average": np.mean, "Min": np.min, "Max": np.max,
              "Product": np.prod}[op]
    want = reduce(every, axis=0)
    if op == "Average" and not dtype.is_floating:
        want = np.trunc(want)  # integers divide toward zero
    if dtype in (tf.uint8, tf.int8) and op == "Product":
        want = want.astype(np.int64).astype(dtype.as_numpy_dtype).astype(np.float64)  # wraps
    got = run(mode, lambda x: hvd.allreduce(x, op=getattr(hvd, op)),
              (values(r, shape, dtype), dtype))
    np.testing.assert_allclose(got, as_reference(want, dtype), rtol=tolerance(dtype, op))


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_allreduce_scale_factors(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    every = np.stack([values(k, (5,), dtype) for k in range(n)])
    got = run(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                                            postscale_factor=4.0),
              (values(r, (5,), dtype), dtype))
    np.testing.assert_allclose(got, every.sum(axis=0) * 2.0, rtol=0.02)


def test_allreduce_of_bools_min_and_max(mode):
    n, r = hvd.size(), hvd.rank()
    every = np.stack([values(k, (6,), tf.bool) for k in range(n)])
    got_max, got_min = run(mode, lambda x: [hvd.allreduce(x, op=hvd.Max, name="bmax"),
                                            hvd.allreduce(x, op=hvd.Min, name="bmin")],
                           (values(r, (6,), tf.bool), tf.bool))
    np.testing.assert_array_equal(got_max, every.any(axis=0))
    np.testing.assert_array_equal(got_min, every.all(axis=0))


def test_grouped_allreduce_mixed_dtypes(mode):
    n, r = hvd.size(), hvd.rank()

    def fn(a, b, c):
        return hvd.grouped_allreduce([a, b, c], op=hvd.Sum)
    got = run(mode, fn, (values(r, (4,), tf.float32), tf.float32),
              (values(r, (2, 3), tf.int32), tf.int32), (values(r, (7,), tf.float64), tf.float64))
    for g, shape in zip(got, [(4,), (2, 3), (7,)]):
        np.testing.assert_allclose(g, sum(values(k, shape, tf.float64) for k in range(n)))


# --- allgather, broadcast, alltoall, reducescatter -----------------------------------------

@pytest.mark.parametrize("dtype", ALL, ids=dtype_id)
def test_allgather_uneven(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    got = run(mode, hvd.allgather, (values(r, (r + 1, 3), dtype), dtype))
    want = np.concatenate([values(k, (k + 1, 3), dtype) for k in range(n)])
    np.testing.assert_array_equal(got, as_reference(want, dtype))


def test_grouped_allgather(mode):
    n, r = hvd.size(), hvd.rank()
    got = run(mode, lambda a, b: hvd.grouped_allgather([a, b]),
              (values(r, (r + 1,), tf.int64), tf.int64), (values(r, (1, 2), tf.bool), tf.bool))
    np.testing.assert_array_equal(got[0], np.concatenate([values(k, (k + 1,), tf.int64)
                                                          for k in range(n)]))
    np.testing.assert_array_equal(got[1], np.concatenate([values(k, (1, 2), tf.bool)
                                                          for k in range(n)]))


@pytest.mark.parametrize("dtype", ALL, ids=dtype_id)
def test_broadcast_from_every_root(dtype, mode):
    r = hvd.rank()
    for root in range(hvd.size()):
        got = run(mode, lambda x: hvd.broadcast(x, root), (values(r, (2, 5), dtype), dtype))
        np.testing.assert_array_equal(got, as_reference(values(root, (2, 5), dtype), dtype))


@pytest.mark.parametrize("dtype", ALL, ids=dtype_id)
def test_alltoall_with_splits(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    # Rank r sends j + 1 rows to rank j; row i of rank r holds 10 * r + i.
    splits = np.array([j + 1 for j in range(n)], np.int32)

    def rows(k):
        if dtype == tf.bool:
            return (np.arange(int(splits.sum())) % 2 == k % 2)[:, None].repeat(2, axis=1)
        return (10 * k + np.arange(int(splits.sum())))[:, None].repeat(2, axis=1)
    out, received = run(mode, lambda x, s: hvd.alltoall(x, splits=s), (rows(r), dtype),
                        (splits, tf.int32))
    start = sum(range(1, r + 1))
    want = np.concatenate([rows(k)[start:start + r + 1] for k in range(n)])
    np.testing.assert_array_equal(out, as_reference(want, dtype))
    np.testing.assert_array_equal(received, [r + 1] * n)


def test_alltoall_even_returns_the_output_alone(mode):
    n, r = hvd.size(), hvd.rank()
    out = run(mode, hvd.alltoall, (np.array([[100 * r + j] for j in range(n)]), tf.int64))
    np.testing.assert_array_equal(out[:, 0], [100 * k + r for k in range(n)])


def test_alltoall_zero_splits_and_empty_tensors(mode):
    n, r = hvd.size(), hvd.rank()
    # Rank r sends everything to rank 0 and nothing to the others.
    splits = np.array([2] + [0] * (n - 1), np.int32)
    out, received = run(mode, lambda x, s: hvd.alltoall(x, splits=s),
                        (np.full((2, 3), r, np.float32), tf.float32), (splits, tf.int32))
    if r == 0:
        np.testing.assert_array_equal(out, np.repeat(np.arange(n), 2)[:, None].repeat(3, 1))
        np.testing.assert_array_equal(received, [2] * n)
    else:
        assert out.shape == (0, 3)
        np.testing.assert_array_equal(received, [0] * n)
    # Nothing at all, with splits and without.
    zeros = np.zeros(n, np.int32)
    out, received = run(mode, lambda x, s: hvd.alltoall(x, splits=s),
                        (np.zeros((0, 4), np.float64), tf.float64), (zeros, tf.int32))
    assert out.shape == (0, 4)
    np.testing.assert_array_equal(received, zeros)
    out = run(mode, hvd.alltoall, (np.zeros((0, 4), np.int32), tf.int32))
    assert out.shape == (0, 4)


@pytest.mark.parametrize("dtype", NUMERIC, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_uneven(dtype, op, mode):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    every = np.stack([values(k, (rows, 2), dtype) for k in range(n)])
    total = every.sum(axis=0)
    if op == "Average":
        total = total / n if dtype.is_floating else np.trunc(total / n)
    # The first rows % n ranks get one extra row.
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(counts[:r])
    got = run(mode, lambda x: hvd.reducescatter(x, op=getattr(hvd, op)),
              (values(r, (rows, 2), dtype), dtype))
    np.testing.assert_allclose(got, as_reference(total[start:start + counts[r]], dtype),
                               rtol=tolerance(dtype, op))


def test_grouped_reducescatter(mode):
    n, r = hvd.size(), hvd.rank()
    got = run(mode, lambda a, b: hvd.grouped_reducescatter([a, b], op=hvd.Sum),
              (values(r, (n, 2), tf.float32), tf.float32), (values(r, (2 * n,), tf.int32),
                                                            tf.int32))
    want_a = sum(values(k, (n, 2), tf.float32) for k in range(n))
    want_b = sum(values(k, (2 * n,), tf.int32) for k in range(n))
    np.testing.assert_allclose(got[0], want_a[r:r + 1])
    np.testing.assert_allclose(got[1], want_b[2 * r:2 * r + 2])


# --- gradients, in every mode ----------------------------------------------------------------

def test_allreduce_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    dy = np.full((3,), r + 1.0)
    for op, want in ((hvd.Sum, sum(k + 1.0 for k in range(n))),
                     (hvd.Average, sum(k + 1.0 for k in range(n)) / n)):
        got = gradient(mode, lambda x: hvd.allreduce(x, op=op), np.ones(3), dy)
        np.testing.assert_allclose(got, np.full(3, want))


def test_allgather_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    # Horovod's test: every rank's output gradient holds k in the rows of rank k; the
    # gradient is this rank's rows of their average over ranks.
    dy = np.concatenate([np.full((k + 1, 2), float(k)) for k in range(n)])
    got = gradient(mode, hvd.allgather, np.ones((r + 1, 2)), dy)
    np.testing.assert_allclose(got, np.full((r + 1, 2), float(r)))


def test_broadcast_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    dy = np.full((4,), r + 1.0)
    got = gradient(mode, lambda x: hvd.broadcast(x, root), np.ones(4), dy)
    want = sum(k + 1.0 for k in range(n)) / n if r == root else 0.0
    np.testing.assert_allclose(got, np.full(4, want))


def test_alltoall_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    splits = [j + 1 for j in range(n)]
    rows = sum(splits)
    # The output's gradient on rank r, row i: 100 * r + i; it goes back to its sender.
    dy = np.array([[100.0 * r + i] for i in range(n * (r + 1))])
    got = gradient(mode, lambda x: hvd.alltoall(x, splits=splits)[0], np.ones((rows, 1)), dy)
    want = np.concatenate([[[100.0 * j + r * (j + 1) + i] for i in range(j + 1)]
                           for j in range(n)])
    np.testing.assert_allclose(got, want)


def test_reducescatter_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    dy = np.full((1, 2), r + 1.0)
    gathered = np.concatenate([np.full((1, 2), k + 1.0) for k in range(n)])
    for op, scale in ((hvd.Sum, n), (hvd.Average, 1.0)):  # Horovod's factors
        got = gradient(mode, lambda x: hvd.reducescatter(x, op=op), np.ones((n, 2)), dy)
        np.testing.assert_allclose(got, gathered * scale)


def test_grouped_allreduce_gradient(mode):
    n, r = hvd.size(), hvd.rank()
    dy = np.full((2,), r + 1.0)
    got = gradient(mode, lambda x: hvd.grouped_allreduce([x, 3 * x], op=hvd.Sum)[1],
                   np.ones(2), dy)
    np.testing.assert_allclose(got, np.full(2, 3 * sum(k + 1.0 for k in range(n))))


# --- the job's facts as ops ------------------------------------------------------------------

def test_job_fact_ops(mode):
    got = run(mode, lambda: [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(),
                             hvd.local_size_op(), hvd.process_set_included_op()])
    assert [int(v) for v in got] == [hvd.rank(), hvd.size(), hvd.local_rank(),
                                     hvd.local_size(), 1]


def test_size_op_of_a_process_set(mode):
    n, r = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    try:
        got = run(mode, lambda: [hvd.size_op(process_set_id=evens.process_set_id),
                                 hvd.process_set_included_op(evens.process_set_id)])
        assert [int(v) for v in got] == [len(evens.ranks), int(r % 2 == 0)]
    finally:
        hvd.remove_process_set(evens)


# --- errors: Horovod's classes, and the runtime serves on ------------------------------------

def still_serving(mode):
    n = hvd.size()
    got = run(mode, lambda x: hvd.allreduce(x, op=hvd.Sum), (np.ones(3), tf.float32))
    np.testing.assert_allclose(got, np.full(3, float(n)))


def test_shape_mismatch_is_a_failed_precondition(mode):
    r = hvd.rank()
    with pytest.raises(failure_class(mode, tf.errors.FailedPreconditionError),
                       match="(?i)shape") as caught:
        run(mode, lambda x: hvd.allreduce(x, name="shape_mismatch"), (np.ones((r + 1, 2)),
                                                                      tf.float32))
    if mode == "eager":
        assert isinstance(caught.value, hvd.MismatchError)
    still_serving(mode)


def test_dtype_mismatch_is_a_failed_precondition(mode):
    dtype = tf.float32 if hvd.rank() == 0 else tf.int32
    with pytest.raises(failure_class(mode, tf.errors.FailedPreconditionError),
                       match="(?i)type"):
        run(mode, lambda x: hvd.allgather(x, name="dtype_mismatch"), (np.ones(2), dtype))
    still_serving(mode)


def test_broadcast_roots_that_differ_are_a_failed_precondition(mode):
    with pytest.raises(failure_class(mode, tf.errors.FailedPreconditionError),
                       match="(?i)root"):
        run(mode, lambda x: hvd.broadcast(x, hvd.rank(), name="root_mismatch"),
            (np.ones(2), tf.float32))
    still_serving(mode)


def test_alltoall_splits_that_do_not_add_up_are_invalid(mode):
    n = hvd.size()
    with pytest.raises(tf.errors.InvalidArgumentError, match="add up"):
        run(mode, lambda x, s: hvd.alltoall(x, splits=s, name="bad_splits"),
            (np.ones((n + 1, 2)), tf.float32), (np.ones(n, np.int32), tf.int32))
    still_serving(mode)


def test_unsupported_dtype_and_root_outside_the_set_are_invalid(mode):
    with pytest.raises(tf.errors.InvalidArgumentError, match="complex64"):
        run(mode, hvd.allreduce, (np.ones(2), tf.complex64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="root_rank"):
        evens = hvd.add_process_set([k for k in range(hvd.size()) if k % 2 == 0])
        try:
            run(mode, lambda x: hvd.broadcast(x, 1, process_set=evens), (np.ones(2), tf.float32))
        finally:
            hvd.remove_process_set(evens)
    still_serving(mode)


# --- IndexedSlices ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_allreduce_of_dense_and_indexed_slices(op, mode):
    n, r = hvd.size(), hvd.rank()

    def fn(values_, dense):
        slices = tf.IndexedSlices(values_, tf.constant([r, r + 1], tf.int64),
                                  dense_shape=tf.constant([n + 1, 2], tf.int64))
        out_slices, out_dense = hvd.grouped_allreduce([slices, dense], op=getattr(hvd, op))
        return [tf.convert_to_tensor(out_slices), out_dense]
    got_sparse, got_dense = run(mode, fn, (np.full((2, 2), r + 1.0), tf.float32),
                                (np.full((3,), r + 1.0), tf.float32))
    total = np.zeros((n + 1, 2))
    for k in range(n):
        total[k:k + 2] += k + 1.0
    divisor = n if op == "Average" else 1
    np.testing.assert_allclose(got_sparse, total / divisor, rtol=1e-6)
    np.testing.assert_allclose(got_dense, np.full(3, sum(k + 1.0 for k in range(n)) / divisor))


def test_indexed_slices_rules_are_horovods():
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0], tf.int64),
                              dense_shape=tf.constant([2, 2], tf.int64))
    for kwargs, match in (({"op": hvd.Max}, "Sum and Average"),
                          ({"op": hvd.Adasum}, "sparse_as_dense"),
                          ({"prescale_factor": 2.0}, "Pre/postscale")):
        with pytest.raises(NotImplementedError, match=match):
            hvd.allreduce(slices, **kwargs)
        with pytest.raises(NotImplementedError, match=match):
            hvd.grouped_allreduce([slices, tf.ones([2])], **kwargs)
