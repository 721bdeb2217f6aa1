"""Gradients of every collective against central finite differences of the global loss
G = sum over ranks of sum(w_r * collective(x)_r), where w_r is a fixed weight per rank.

Horovod 0.28.1's TensorFlow gradients are that derivative for allreduce, alltoall and
the ops built on them, and a multiple of it elsewhere: allgather and broadcast average the
output's gradient over the ranks (1/size of dG/dx), reducescatter multiplies it by the set's
size (size times dG/dx). Each test says which multiple it expects."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd


def global_loss(fn, x, w):
    local = tf.reduce_sum(tf.cast(w, tf.float64) * tf.cast(fn(x), tf.float64))
    return float(hvd.allreduce(tf.reshape(local, [1]), op=hvd.Sum).numpy()[0])


def check_gradient(fn, shape, eps=1e-3, scale=1.0):
    """shape: this rank's input shape, or a function of the rank giving it; the gradient must
    be `scale` times dG/dx."""
    shape_of = shape if callable(shape) else (lambda k: shape)
    n, r = hvd.size(), hvd.rank()
    shape = shape_of(r)
    rng = np.random.RandomState(100 + r)
    x0 = rng.rand(*shape)
    x = tf.constant(x0, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
        w = tf.constant(np.random.RandomState(200 + r).rand(*y.shape), tf.float64)
        loss = tf.reduce_sum(w * y)
    analytic = tape.gradient(loss, x).numpy()
    numeric = np.zeros(shape)
    # Every rank perturbs in turn, the others evaluating with it.
    for k in range(n):
        for i in range(int(np.prod(shape_of(k)))):
            values = []
            for sign in (1.0, -1.0):
                xp = x0.copy()
                if k == r:
                    xp.reshape(-1)[i] += sign * eps
                values.append(global_loss(fn, tf.constant(xp, tf.float64), w))
            if k == r:
                numeric.reshape(-1)[i] = (values[0] - values[1]) / (2 * eps)
    np.testing.assert_allclose(analytic, scale * numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_allreduce_gradient(op):
    check_gradient(lambda x: hvd.allreduce(x, op=op, prescale_factor=2.0), (2, 2))


def test_grouped_allreduce_gradient():
    check_gradient(lambda x: hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum)[1] * 3, (3,))


def test_allgather_gradient_uneven():
    check_gradient(lambda x: hvd.allgather(x), lambda k: (k + 1, 2), scale=1.0 / hvd.size())


def test_broadcast_gradient():
    check_gradient(lambda x: hvd.broadcast(x, root_rank=hvd.size() - 1), (3,),
                   scale=1.0 / hvd.size())


def test_alltoall_gradient():
    n = hvd.size()
    splits = [j + 1 for j in range(n)]
    check_gradient(lambda x: hvd.alltoall(x, splits=splits)[0], (sum(splits), 1))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_reducescatter_gradient(op):
    n = hvd.size()
    check_gradient(lambda x: hvd.reducescatter(x, op=op), (n + 1, 2), scale=n)


def test_gradient_inside_tf_function():
    x = tf.constant([1.0, 2.0], tf.float64) * (hvd.rank() + 1)

    @tf.function
    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.allreduce(x, op=hvd.Sum) ** 2)
        return tape.gradient(loss, x)
    n = hvd.size()
    total = sum((k + 1) * np.array([1.0, 2.0]) for k in range(n))
    # d/dx_r of the local loss sum(y^2) is the sum over ranks of 2y.
    np.testing.assert_allclose(grad(x).numpy(), 2 * total * n)


def test_grouped_allgather_gradient_uneven():
    check_gradient(lambda x: hvd.grouped_allgather([x, 3 * x[:1]])[0] * 2
                   + tf.reduce_sum(hvd.grouped_allgather([x, 3 * x[:1]])[1]),
                   lambda k: (k + 1, 2), scale=1.0 / hvd.size())


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_grouped_reducescatter_gradient(op):
    n = hvd.size()
    check_gradient(lambda x: hvd.grouped_reducescatter([x, x * x], op=op,
                                                       prescale_factor=0.5)[1], (n + 1, 2),
                   scale=n)


def test_reducescatter_gradient_of_another_op_is_refused():
    x = tf.ones([hvd.size(), 2], tf.float64)
    with pytest.raises(NotImplementedError, match="Sum and Average"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = hvd.reducescatter(x, op=hvd.Max)
        tape.gradient(y, x)
