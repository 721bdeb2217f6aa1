"""DistributedGradientTape and DistributedOptimizer against single-process training on the
combined batch; process sets; bad input."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd
from ronde.tensorflow import compiled_ops

BATCH_PER_RANK = 4
STEPS = 3


def data(n):
    rng = np.random.RandomState(7)
    x = rng.rand(STEPS, BATCH_PER_RANK * n, 5).astype(np.float32)
    ids = rng.randint(0, 6, size=(STEPS, BATCH_PER_RANK * n))
    y = rng.rand(STEPS, BATCH_PER_RANK * n, 1).astype(np.float32)
    return x, ids, y


def make_variables():
    rng = np.random.RandomState(3)
    return [tf.Variable(rng.rand(5, 1).astype(np.float32)), tf.Variable(np.zeros(1, np.float32)),
            tf.Variable(rng.rand(6, 1).astype(np.float32))]  # an embedding: sparse gradient


def loss_fn(variables, x, ids, y):
    kernel, bias, table = variables
    pred = tf.matmul(x, kernel) + bias + tf.gather(table, ids)
    return tf.reduce_mean((pred - y) ** 2)


def reference(lr=0.1):
    """One process, the combined batch of every rank."""
    variables = make_variables()
    x, ids, y = data(hvd.size())
    for s in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x[s], ids[s], y[s])
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(lr * tf.convert_to_tensor(g))
    return [v.numpy() for v in variables]


def shard(s):
    x, ids, y = data(hvd.size())
    part = slice(hvd.rank() * BATCH_PER_RANK, (hvd.rank() + 1) * BATCH_PER_RANK)
    return x[s, part], ids[s, part], y[s, part]


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["sparse", "dense"])
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "function"])
def test_gradient_tape_matches_combined_batch(sparse_as_dense, compile):
    variables = make_variables()

    def step(x, ids, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x, ids, y)
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        grads = tape.gradient(loss, variables)
        assert isinstance(grads[2], tf.IndexedSlices) != sparse_as_dense
        for v, g in zip(variables, grads):
            v.assign_sub(0.1 * tf.convert_to_tensor(g))
    step = tf.function(step) if compile else step
    for s in range(STEPS):
        step(*shard(s))
    for got, want in zip(variables, reference()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_gradient_tape_predivide_and_fp16():
    variables = make_variables()
    for s in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, *shard(s))
        tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0,
                                           compression=hvd.Compression.fp16,
                                           sparse_as_dense=True)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(0.1 * g)
    for got, want in zip(variables, reference()):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3)


def test_distributed_optimizer_in_function_matches_combined_batch():
    variables = make_variables()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))

    @tf.function
    def step(x, ids, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x, ids, y)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    for s in range(STEPS):
        step(*shard(s))
    for got, want in zip(variables, reference()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_distributed_optimizer_refuses_what_it_cannot_wrap():
    with pytest.raises(TypeError, match="TF1 optimizer .* or a Keras optimizer"):
        hvd.DistributedOptimizer(object())


def test_process_set_collectives():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("needs two ranks")
    evens = hvd.add_process_set(hvd.ProcessSet(range(0, n, 2)))
    try:
        x = tf.constant([float(r + 1)])
        if evens.included():
            total = hvd.allreduce(x, op=hvd.Sum, process_set=evens)
            np.testing.assert_allclose(total.numpy(), [sum(k + 1 for k in range(0, n, 2))])
            gathered = tf.function(lambda x: hvd.allgather(x, process_set=evens))(x)
            np.testing.assert_allclose(gathered.numpy(), [k + 1 for k in range(0, n, 2)])
            root = max(range(0, n, 2))
            np.testing.assert_allclose(
                hvd.broadcast(x, root_rank=root, process_set=evens).numpy(), [root + 1])
        with pytest.raises(ValueError, match="not in"):
            hvd.broadcast(x, root_rank=1, process_set=evens)
        # A rank outside the set keeps its own gradient.
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = x * 2.0
        grad = hvd.DistributedGradientTape(tape, process_set=evens).gradient(loss, x)
        np.testing.assert_allclose(grad.numpy(), [2.0])
    finally:
        hvd.barrier()
        hvd.remove_process_set(evens)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "function"])
def test_shape_mismatch_raises_on_every_rank(compile):
    r = hvd.rank()
    x = tf.ones([r + 1, 2])
    fn = (lambda x: hvd.allreduce(x, name="mismatch_%s" % compile))
    fn = tf.function(fn) if compile else fn
    # Horovod's class in both modes; eagerly also ronde's. Inside a function the numpy
    # bridge's py_func can only fail with UnknownError (TensorFlow maps no other exception of
    # a py_func to its code; docs/frontends.md).
    error = tf.errors.FailedPreconditionError
    if compile and compiled_ops.library() is None:
        error = tf.errors.UnknownError
    with pytest.raises(error, match="(?i)shape") as caught:
        fn(x)
    assert compile or isinstance(caught.value, hvd.MismatchError)


def test_dtype_mismatch_raises_on_every_rank():
    x = tf.ones([2], tf.float32 if hvd.rank() == 0 else tf.float64)
    with pytest.raises(hvd.MismatchError, match="(?i)type"):
        hvd.allreduce(x, name="dtype_mismatch")


def test_unsupported_dtype_names_it():
    with pytest.raises(tf.errors.InvalidArgumentError, match="complex64"):
        hvd.allreduce(tf.constant([1 + 2j], tf.complex64))
    with pytest.raises(ValueError, match="string"):  # also a ValueError, as before
        hvd.allgather(tf.constant(["a"]))


def test_ops_before_init_raise():
    hvd.shutdown()
    try:
        with pytest.raises(ValueError, match="init"):
            hvd.allreduce(tf.ones([2]))
        with pytest.raises(ValueError, match="init"):
            tf.function(lambda: hvd.allgather(tf.ones([2])))()
    finally:
        hvd.init()


def _ten_layers():
    return [tf.Variable(tf.ones([4, 4]) * (i + 1)) for i in range(10)]


def _ten_layer_loss(layers, x):
    y = x
    for w in layers:
        y = tf.tanh(tf.matmul(y, w) * 0.1)
    return tf.reduce_sum(y)


def _ten_layer_tape_step(layers):
    """A tf.function: the averaged gradients of _ten_layer_loss through DistributedGradientTape."""
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = _ten_layer_loss(layers, x)
        return hvd.DistributedGradientTape(tape).gradient(loss, layers)
    return step


def test_tape_submits_every_gradient_before_waiting_for_any(monkeypatch):
    """In a tf.function the runtime must see all gradients before the first wait, so that it
    can fuse them and no rank blocks while holding back a submission others wait for. With
    the compiled kernels each gradient is one asynchronous RondeAllreduce, marked to run
    independently of the function's other stateful ops: it submits as the backward pass
    produces its gradient and blocks no thread, and no Python runs in the step. The numpy
    bridge splits each into a submitting and a waiting op, all submitting ones first."""
    from ronde.common import numpy_ops
    events = []
    submit, wait = numpy_ops.allreduce, numpy_ops.Pending.wait

    def recording_submit(array, name, *args, **kwargs):
        events.append(("submit", name))
        return submit(array, name, *args, **kwargs)

    def recording_wait(self):
        events.append(("wait", None))
        return wait(self)
    monkeypatch.setattr(numpy_ops, "allreduce", recording_submit)
    monkeypatch.setattr(numpy_ops.Pending, "wait", recording_wait)
    layers = _ten_layers()
    step = _ten_layer_tape_step(layers)
    x = tf.ones([2, 4]) * (hvd.rank() + 1)
    graph = step.get_concrete_function(x).graph
    kinds = [op.type for op in graph.get_operations()]
    if compiled_ops.library() is not None:
        assert kinds.count("RondeAllreduce") == 10, kinds
        assert not [k for k in kinds if "PyFunc" in k], kinds
        independent = [op for op in graph.get_operations() if op.type == "RondeAllreduce" and
                       op.get_attr("_independent_side_effects")]
        assert len(independent) == 10
    grads = step(x)
    if compiled_ops.library() is None:
        order = [kind for kind, _ in events]
        assert order.count("submit") == 10 and order.count("wait") == 10
        assert order.index("wait") == 10, order
    # Every rank's gradient, computed here alone, averaged.
    expected = [tf.zeros([4, 4]) for _ in layers]
    for r in range(hvd.size()):
        with tf.GradientTape() as tape:
            loss = _ten_layer_loss(layers, tf.ones([2, 4]) * (r + 1))
        expected = [e + g / hvd.size() for e, g in zip(expected, tape.gradient(loss, layers))]
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)
