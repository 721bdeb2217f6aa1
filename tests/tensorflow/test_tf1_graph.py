"""TF1 graph mode as Horovod's own tutorial runs it: a graph, a tf.compat.v1 optimizer wrapped
in hvd.DistributedOptimizer, a Session or MonitoredTrainingSession with
BroadcastGlobalVariablesHook. Each training test replays the job in numpy, in this process,
from every rank's data (the reference knows nothing of ronde), and each test builds its own
tf.Graph so that the suite's eager fixtures (barrier per test) still hold around it."""

import threading

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd

v1 = tf.compat.v1
LR = 0.125  # exact in float32, which TF1 optimizers hold their hyperparameters in
W0 = np.array([[0.5], [-0.25], [1.0]])
B0 = np.array([0.2])


def batch(rank, step, rows=6):
    """Rank `rank`'s batch at `step`: different on every rank and every step."""
    rng = np.random.RandomState(1000 * step + rank)
    return rng.randn(rows, 3), rng.randn(rows, 1)


def gradients(w, b, x, y):
    """d/d(w, b) of mean((x w + b - y)^2), by hand."""
    residual = x @ w + b - y
    return 2.0 * x.T @ residual / len(x), np.array([2.0 * residual.mean()])


def linear_model():
    """Placeholders, variables and the loss of the model `gradients` differentiates."""
    x = v1.placeholder(tf.float64, [None, 3])
    y = v1.placeholder(tf.float64, [None, 1])
    w = tf.Variable(W0, name="w")
    b = tf.Variable(B0, name="b")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    return x, y, w, b, loss


def combined(step, w, b, reduce):
    """Every rank's gradient at (w, b) for `step`, combined by `reduce` (np.mean or np.sum)."""
    per_rank = [gradients(w, b, *batch(k, step)) for k in range(hvd.size())]
    return (reduce([g[0] for g in per_rank], axis=0), reduce([g[1] for g in per_rank], axis=0))


@pytest.mark.parametrize("options,reduce", [
    ({}, np.mean),
    ({"op": hvd.Sum}, np.sum),
    ({"num_groups": 2}, np.mean),
    ({"groups": "by variable"}, np.mean),
    ({"gradient_predivide_factor": 2.0}, np.mean),
], ids=["average", "sum", "num_groups", "groups", "predivide"])
def test_distributed_optimizer_trains_on_the_combined_gradient(options, reduce):
    steps = 3
    with tf.Graph().as_default():
        x, y, w, b, loss = linear_model()
        if options.get("groups") == "by variable":
            options = dict(options, groups=[[w], [b]])
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(LR), **options)
        train = opt.minimize(loss)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            for step in range(steps):
                xs, ys = batch(hvd.rank(), step)
                session.run(train, {x: xs, y: ys})
            got_w, got_b = session.run([w, b])
    want_w, want_b = W0.copy(), B0.copy()
    for step in range(steps):
        gw, gb = combined(step, want_w, want_b, reduce)
        want_w, want_b = want_w - LR * gw, want_b - LR * gb
    np.testing.assert_allclose(got_w, want_w, rtol=1e-12)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-12)


@pytest.mark.parametrize("average", [False, True], ids=["summed", "averaged"])
def test_backward_passes_per_step_applies_every_second_step(average):
    with tf.Graph().as_default():
        x, y, w, b, loss = linear_model()
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(LR),
                                       backward_passes_per_step=2,
                                       average_aggregated_gradients=average)
        train = opt.minimize(loss)
        with v1.Session() as session:
            # The aggregation's counter and sums are local variables, as in Horovod.
            session.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            session.run(train, dict(zip((x, y), batch(hvd.rank(), 0))))
            after_one = session.run(w)
            session.run(train, dict(zip((x, y), batch(hvd.rank(), 1))))
            after_two = session.run([w, b])
    # The first pass only accumulates; the second reduces both passes' sum (over the ranks:
    # the average) and applies it once, both taken at the initial values.
    np.testing.assert_array_equal(after_one, W0)
    g0, g1 = combined(0, W0, B0, np.mean), combined(1, W0, B0, np.mean)
    passes = 2.0 if average else 1.0
    np.testing.assert_allclose(after_two[0], W0 - LR * (g0[0] + g1[0]) / passes, rtol=1e-12)
    np.testing.assert_allclose(after_two[1], B0 - LR * (g0[1] + g1[1]) / passes, rtol=1e-12)


def test_adasum_of_identical_updates_is_the_update():
    # Adasum(a, a) = a: with the same batch on every rank the job takes one process's steps.
    # Momentum keeps optimizer state, which Adasum's delta optimizer must leave local.
    with tf.Graph().as_default():
        x, y, w, b, loss = linear_model()
        opt = hvd.DistributedOptimizer(v1.train.MomentumOptimizer(LR, 0.5), op=hvd.Adasum)
        if hvd.size() & (hvd.size() - 1):
            # Horovod refuses Adasum on a number of ranks that is not a power of two.
            with pytest.raises(NotImplementedError, match="power of 2"):
                opt.minimize(loss)
            return
        train = opt.minimize(loss)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            for step in range(3):
                session.run(train, dict(zip((x, y), batch(0, step))))
            got_w = session.run(w)
    want_w, want_b = W0.copy(), B0.copy()
    velocity_w, velocity_b = np.zeros_like(W0), np.zeros_like(B0)
    for step in range(3):
        gw, gb = gradients(want_w, want_b, *batch(0, step))
        velocity_w, velocity_b = 0.5 * velocity_w + gw, 0.5 * velocity_b + gb
        want_w, want_b = want_w - LR * velocity_w, want_b - LR * velocity_b
    np.testing.assert_allclose(got_w, want_w, rtol=1e-10)


def test_broadcast_global_variables_hook_in_a_monitored_training_session():
    with tf.Graph().as_default():
        w = tf.Variable(np.full(4, hvd.rank() + 1.0))
        step = v1.train.get_or_create_global_step()
        increment = v1.assign_add(step, 1)
        hooks = [hvd.BroadcastGlobalVariablesHook(0), v1.train.StopAtStepHook(last_step=3)]
        with v1.train.MonitoredTrainingSession(hooks=hooks) as session:
            got = session.run(w)
            while not session.should_stop():
                session.run(increment)
    np.testing.assert_array_equal(got, np.full(4, 1.0))


def test_broadcast_global_variables_in_a_session():
    root = hvd.size() - 1
    with tf.Graph().as_default():
        w = tf.Variable(np.arange(3.0) + hvd.rank())
        counter = tf.Variable(hvd.rank() * 10, dtype=tf.int64)
        sync = hvd.broadcast_global_variables(root)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            session.run(sync)
            got_w, got_counter = session.run([w, counter])
    np.testing.assert_array_equal(got_w, np.arange(3.0) + root)
    assert got_counter == root * 10


def test_object_collectives_with_a_session():
    with tf.Graph().as_default():
        with v1.Session() as session:
            got = hvd.broadcast_object({"from": hvd.rank()}, root_rank=0, session=session)
            gathered = hvd.allgather_object(hvd.rank() * 2, session=session)
    assert got == {"from": 0}
    assert gathered == [2 * k for k in range(hvd.size())]


def build_gradient_graph():
    """Every collective and its gradient in one graph, with shapes that depend on a job fact:
    what a rank builds before its peers have built anything."""
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float32, [None, 2])
        shaped = tf.reshape(x, tf.stack([hvd.size_op() * 0 + 1, -1]))
        outputs = [hvd.allgather(x), hvd.broadcast(x, 0), hvd.allreduce(x),
                   hvd.reducescatter(x), hvd.alltoall(x), hvd.allgather(shaped)]
        for out in outputs:
            tf.gradients(tf.reduce_sum(out * out), x)


def test_building_a_graph_on_one_rank_runs_no_collective():
    # Horovod's ops are stateful: TensorFlow neither evaluates them while it builds a graph
    # (the shape refiner's constant folding) nor prunes them. Were one run, rank 0 would wait
    # here for peers that never join it.
    if hvd.rank() == 0:
        builder = threading.Thread(target=build_gradient_graph, daemon=True)
        builder.start()
        builder.join(60)
        assert not builder.is_alive(), "building a graph waits on the other ranks"


def test_size_and_rank_ops_read_the_job_when_run():
    with tf.Graph().as_default():
        facts = [hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op()]
        with v1.Session() as session:
            got = session.run(facts)
    assert got == [hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank()]


def test_local_source_of_a_distributed_tape_is_not_reduced():
    # Eager TF2: a variable registered as local keeps its own gradient, divided by the size
    # (scale_local_gradients, Horovod's default); the shared one is averaged.
    n, r = hvd.size(), hvd.rank()
    shared = tf.Variable([1.0, 2.0], dtype=tf.float64)
    local = tf.Variable([3.0], dtype=tf.float64)
    with tf.GradientTape() as tape:
        loss = (r + 1.0) * (tf.reduce_sum(shared) + tf.reduce_sum(local))
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    got_shared, got_local = tape.gradient(loss, [shared, local])
    np.testing.assert_allclose(got_shared.numpy(), np.full(2, (n + 1) / 2.0))
    np.testing.assert_allclose(got_local.numpy(), [(r + 1.0) / n])
