"""Every collective x dtype, eagerly and in tf.function, against numpy expectations built
from what each rank is known to hold."""

import os

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd
from ronde import _core
from ronde.common import numpy_ops as nops
from ronde.tensorflow import compiled_ops

DTYPES = [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
          tf.float64, tf.bool]
NUMERIC = [d for d in DTYPES if d != tf.bool]


def rank_values(r, shape=(2, 3)):
    """What rank r holds: small integers, exact in every dtype."""
    return (np.arange(np.prod(shape)).reshape(shape) % 5 + r + 1).astype(np.float64)


def as_tf(values, dtype):
    if dtype == tf.bool:
        return tf.constant(values.astype(np.int64) % 2 == 1)
    return tf.cast(tf.constant(values), dtype)


def as_np(tensor):
    return tf.cast(tensor, tf.float64).numpy() if tensor.dtype != tf.bool else tensor.numpy()


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
def test_allreduce_sum_min_max(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    x = as_tf(rank_values(r), dtype)
    all_values = np.stack([rank_values(k) for k in range(n)])

    @mode
    def run(x):
        return (hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x, op=hvd.Min),
                hvd.allreduce(x, op=hvd.Max))
    total, low, high = run(x)
    assert total.dtype == dtype and total.shape == x.shape
    np.testing.assert_array_equal(as_np(total), as_np(as_tf(all_values.sum(0), dtype)))
    np.testing.assert_array_equal(as_np(low), all_values.min(0))
    np.testing.assert_array_equal(as_np(high), all_values.max(0))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64],
                         ids=lambda d: d.name)
def test_allreduce_average_and_scaling(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    x = as_tf(rank_values(r), dtype)
    expected = np.mean([rank_values(k) for k in range(n)], axis=0)

    @mode
    def run(x):
        return (hvd.allreduce(x), hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                                                postscale_factor=4.0))
    average, scaled = run(x)
    tol = 1e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
    np.testing.assert_allclose(as_np(average), expected, rtol=tol)
    np.testing.assert_allclose(as_np(scaled), expected * n * 2.0, rtol=tol)


def test_allreduce_max_of_bools_is_a_logical_or():
    r = hvd.rank()
    x = tf.constant([r == 0, False, True])
    out = hvd.allreduce(x, op=hvd.Max)
    np.testing.assert_array_equal(out.numpy(), [True, False, True])


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_cast_compression_keeps_dtype(compression, mode):
    x = tf.constant(rank_values(hvd.rank()), tf.float32)
    compressor = getattr(hvd.Compression, compression)
    payload, _ = compressor.compress(x)
    assert payload.dtype == {"fp16": tf.float16, "bf16": tf.bfloat16}[compression]

    @mode
    def run(x):
        return hvd.allreduce(x, op=hvd.Sum, compression=compressor)
    out = run(x)
    assert out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy(), sum(rank_values(k) for k in range(hvd.size())))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allgather_uneven_first_dimension(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    x = as_tf(rank_values(r, (r + 1, 2)), dtype)

    @mode
    def run(x):
        return hvd.allgather(x)
    out = run(x)
    expected = np.concatenate([rank_values(k, (k + 1, 2)) for k in range(n)])
    np.testing.assert_array_equal(as_np(out), as_np(as_tf(expected, dtype)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_broadcast_from_every_root(dtype, mode):
    r = hvd.rank()
    x = as_tf(rank_values(r), dtype)
    for root in range(hvd.size()):
        @mode
        def run(x):
            return hvd.broadcast(x, root)
        np.testing.assert_array_equal(as_np(run(x)), as_np(as_tf(rank_values(root), dtype)))


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
def test_alltoall_with_splits(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    # Rank r sends j + 1 rows to rank j; row values encode (sender, receiver).
    rows = [np.full((j + 1, 2), 10 * r + j, np.float64) for j in range(n)]
    x = as_tf(np.concatenate(rows), dtype)
    splits = tf.constant([j + 1 for j in range(n)], tf.int32)

    @mode
    def run(x, splits):
        return hvd.alltoall(x, splits=splits)
    out, received = run(x, splits)
    expected = np.concatenate([np.full((r + 1, 2), 10 * k + r, np.float64) for k in range(n)])
    np.testing.assert_array_equal(as_np(out), as_np(as_tf(expected, dtype)))
    np.testing.assert_array_equal(received.numpy(), [r + 1] * n)


def test_alltoall_even_without_splits(mode):
    n, r = hvd.size(), hvd.rank()
    x = tf.constant([[100 * r + j] for j in range(n)], tf.int64)
    # Without splits Horovod returns the output alone.
    out = mode(lambda x: hvd.alltoall(x))(x)
    np.testing.assert_array_equal(out.numpy()[:, 0], [100 * k + r for k in range(n)])


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
def test_reducescatter_uneven(dtype, mode):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1  # the first rows % n ranks get one extra row
    x = as_tf(rank_values(r, (rows, 2)), dtype)

    @mode
    def run(x):
        return hvd.reducescatter(x, op=hvd.Sum)
    out = run(x)
    total = sum(rank_values(k, (rows, 2)) for k in range(n))
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(counts[:r])
    np.testing.assert_array_equal(as_np(out), as_np(as_tf(total[start:start + counts[r]],
                                                          dtype)))


def test_grouped_allreduce_allgather_reducescatter(mode):
    n, r = hvd.size(), hvd.rank()
    a = tf.constant(rank_values(r), tf.float32)
    b = tf.constant(rank_values(r, (n, 4)), tf.float64)

    @mode
    def run(a, b):
        return (hvd.grouped_allreduce([a, b], op=hvd.Sum), hvd.grouped_allgather([a, b]),
                hvd.grouped_reducescatter([b], op=hvd.Sum))
    (sa, sb), (ga, gb), (rb,) = run(a, b)
    np.testing.assert_array_equal(sa.numpy(), sum(rank_values(k) for k in range(n)))
    np.testing.assert_array_equal(sb.numpy(), sum(rank_values(k, (n, 4)) for k in range(n)))
    np.testing.assert_array_equal(ga.numpy(), np.concatenate([rank_values(k) for k in range(n)]))
    assert gb.shape == (n * n, 4)
    np.testing.assert_array_equal(rb.numpy(),
                                  sum(rank_values(k, (n, 4)) for k in range(n))[r:r + 1])


def test_indexed_slices_allreduce_gathers_values_and_indices():
    n, r = hvd.size(), hvd.rank()
    slices = tf.IndexedSlices(tf.constant([[float(r + 1)] * 2]), tf.constant([r]),
                              dense_shape=tf.constant([n, 2]))
    out = hvd.allreduce(slices, op=hvd.Average)
    assert isinstance(out, tf.IndexedSlices)
    dense = tf.convert_to_tensor(out).numpy()
    np.testing.assert_allclose(dense, [[(k + 1) / n] * 2 for k in range(n)])


def test_join_barrier_and_objects():
    n, r = hvd.size(), hvd.rank()
    hvd.barrier()
    assert hvd.broadcast_object({"from": r, "list": [r]}, root_rank=n - 1) == \
        {"from": n - 1, "list": [n - 1]}
    assert hvd.allgather_object(("rank", r)) == [("rank", k) for k in range(n)]
    # Rank r runs r extra allreduces; the joined ranks add zeros to them.
    for _ in range(r):
        hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="after_join")
    last = hvd.join()
    assert 0 <= last < n


def test_unnamed_requests_meet_again_after_a_join():
    # Every rank but 0 makes an unnamed allreduce that rank 0 skips (it joined); after the
    # join every rank's unnamed requests must meet again (before, their counts differed).
    n, r = hvd.size(), hvd.rank()
    if r != 0:
        out = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)
        assert out.numpy().tolist() == [float(n - 1)]
    hvd.join()
    out = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)
    assert out.numpy().tolist() == [float(n)]
    assert hvd.allgather(tf.constant([r])).numpy().tolist() == list(range(n))


def test_broadcast_variables_in_function(mode):
    r = hvd.rank()
    variables = [tf.Variable(rank_values(r)), tf.Variable(tf.fill([3], r))]

    @mode
    def run():
        hvd.broadcast_variables(variables, root_rank=0)
    run()
    np.testing.assert_array_equal(variables[0].numpy(), rank_values(0))
    np.testing.assert_array_equal(variables[1].numpy(), [0, 0, 0])


def test_job_facts():
    assert hvd.size() >= 1 and 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1
    assert hvd.is_initialized() and hvd.ronde_built() and not hvd.mpi_enabled()


def test_adasum_through_the_numpy_bridge():
    # The core's Adasum (tests/adasum_test.cc checks the recursion): for identical vectors
    # a' = (1 - 1/2) a + (1 - 1/2) a = a at every level; a world not a power of two refuses
    # (NotImplementedError, as Horovod's), and the runtime refuses it too.
    t = tf.constant(np.arange(1.0, 8.0), dtype=tf.float64)
    if hvd.size() & (hvd.size() - 1) == 0:
        np.testing.assert_allclose(hvd.allreduce(t, op=hvd.Adasum).numpy(), t.numpy())
    else:
        with pytest.raises(NotImplementedError, match="power of 2"):
            hvd.allreduce(t, op=hvd.Adasum)
        with pytest.raises(_core.InvalidArgumentError, match="power-of-two"):
            nops.allreduce(t.numpy(), "adasum.core", nops.Adasum).wait()


def test_the_collectives_run_where_RONDE_TENSORFLOW_OPS_says():
    # CI runs the suites with compiled (the kernels must load) and with python; auto takes
    # whichever this install has.
    mode = os.environ.get("RONDE_TENSORFLOW_OPS", "auto")
    if mode == "compiled":
        assert compiled_ops.library() is not None
    elif mode == "python":
        assert compiled_ops.library() is None and "python" in compiled_ops.why_not()
    graph = tf.function(lambda t: hvd.allreduce(t, name="which.path")).get_concrete_function(
        tf.ones([3])).graph
    kinds = {op.type for op in graph.get_operations()}
    if compiled_ops.library() is not None:
        assert "RondeAllreduce" in kinds and not any("PyFunc" in k for k in kinds), kinds
    else:
        assert any("PyFunc" in k for k in kinds), kinds


def test_scale_factors_keep_double_precision(mode):
    # TensorFlow's float attributes are 32-bit; the compiled ops carry the scales exactly.
    values = rank_values(hvd.rank(), (4,))
    t = tf.constant(values, tf.float64)
    out = mode(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=1.0 / 3,
                                       postscale_factor=0.1, name="exact.scales"))(t)
    expected = sum(rank_values(r, (4,)) * (1.0 / 3) for r in range(hvd.size())) * 0.1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-14)


def test_a_traced_function_after_shutdown_fails_naming_init():
    fn = tf.function(lambda t: hvd.allreduce(t, name="after.shutdown"))
    concrete = fn.get_concrete_function(tf.ones([2]))  # traced while the runtime runs
    hvd.barrier()  # every rank has traced before any stops the job's runtime
    hvd.shutdown()
    try:
        with pytest.raises(tf.errors.OpError, match="init"):
            concrete(tf.ones([2]))
    finally:
        hvd.init()


def test_barrier_and_join_run_as_ops_inside_a_function():
    calls = tf.Variable(0)

    @tf.function
    def meet():
        hvd.barrier()
        calls.assign_add(1)
        return hvd.join()
    for _ in range(3):  # each call meets the peers again, not only the tracing one
        assert int(meet()) in range(hvd.size())
    assert int(calls.numpy()) == 3


def test_independent_ops_inside_a_function_in_an_order_that_differs_by_rank():
    # Ranks build two independent collectives in opposite orders: the names pair them, and
    # the function runs both at once, neither waiting on a thread (eagerly, and as stateful
    # ops in program order, each would wait for the other's peer forever). The numpy bridge's
    # ops are stateful py_funcs that a tf.function runs in program order, each blocking its
    # thread (docs/frontends.md): there every rank builds them in the same order.
    first = tf.fill([3], float(hvd.rank() + 1))
    second = tf.fill([2, 2], float(10 * (hvd.rank() + 1)))
    reverse = compiled_ops.library() is not None and hvd.rank() % 2 == 1

    def both(a, b):
        if not reverse:
            x = hvd.allreduce(a, op=hvd.Sum, name="order.a")
            y = hvd.allgather(b, name="order.b")
        else:
            y = hvd.allgather(b, name="order.b")
            x = hvd.allreduce(a, op=hvd.Sum, name="order.a")
        return x, y
    x, y = tf.function(both)(first, second)
    n = hvd.size()
    np.testing.assert_array_equal(x.numpy(), [n * (n + 1) / 2] * 3)
    np.testing.assert_array_equal(y.numpy(), np.concatenate(
        [np.full([2, 2], 10.0 * (r + 1)) for r in range(n)]))
