"""ronde.tensorflow.keras.DistributedOptimizer in model.fit and custom loops, on the optimizers of
whatever tf.keras is (tf_keras: new and legacy), against one process on the combined batch."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd_tf
import ronde.tensorflow.keras as hvd
from tfk_support import (KERAS2, KINDS, PER_RANK, STEPS, assert_weights_close, data, fit, keras,
                         make_model, numpy_adasum, optimizers, shard)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["average", "sum"])
def test_matches_combined_batch(kind, op):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    opt = hvd.DistributedOptimizer(optimizers(kind).SGD(0.1),
                                   op=hvd.Average if op == "average" else hvd.Sum)
    fit(model, opt, *shard(x, y), batch=PER_RANK)
    # A sum of the ranks' mean gradients is n times the combined batch's mean gradient.
    reference = make_model()
    fit(reference, optimizers(kind).SGD(0.1 if op == "average" else 0.1 * n), x, y,
        batch=PER_RANK * n)
    assert_weights_close(model, reference)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("average", [True, False])
def test_backward_passes_per_step(kind, average):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    opt = hvd.DistributedOptimizer(optimizers(kind).SGD(0.1), backward_passes_per_step=2,
                                   average_aggregated_gradients=average)
    fit(model, opt, *shard(x, y), batch=PER_RANK)
    # Two passes reduced together: one step on both passes' combined batches (their mean
    # gradient, or twice it when the sum is not averaged).
    reference = make_model()
    fit(reference, optimizers(kind).SGD(0.1 if average else 0.2), x, y, batch=2 * PER_RANK * n)
    assert_weights_close(model, reference)
    # Horovod's Keras 2 aggregation counts every pass; Keras 3 applies on every N-th only.
    assert int(opt.iterations.numpy()) == (STEPS if KERAS2 else STEPS // 2)


@pytest.mark.parametrize("kind", KINDS)
def test_adam_fp16_compression_and_predivide(kind):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    fit(model, hvd.DistributedOptimizer(optimizers(kind).Adam(0.01),
                                        compression=hvd.Compression.fp16,
                                        gradient_predivide_factor=2.0), *shard(x, y),
        batch=PER_RANK)
    reference = make_model()
    fit(reference, optimizers(kind).Adam(0.01), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference, tol=2e-3)


def embedding_model(seed=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(10, 3),
                             keras.layers.Flatten(), keras.layers.Dense(1)])


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(sparse_as_dense):
    n = hvd.size()
    rng = np.random.RandomState(4)
    x = rng.randint(0, 10, size=(STEPS * PER_RANK * n, 2)).astype(np.int32)
    y = rng.rand(len(x), 1).astype(np.float32)
    model = embedding_model()
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.5),
                                        sparse_as_dense=sparse_as_dense), *shard(x, y),
        batch=PER_RANK)
    reference = embedding_model()
    fit(reference, keras.optimizers.SGD(0.5), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference)


def grouped_reductions(opt, model):
    """Grouped allreduce ops in a traced reduction of the model's gradients (the compiled
    kernels' RondeGroupedAllreduce, or the numpy path's ronde_grouped_allreduce)."""
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    graph = tf.function(lambda: opt._ronde_reduce(grads, model.trainable_variables)) \
        .get_concrete_function().graph
    return sum(op.type == "RondeGroupedAllreduce" or "ronde_grouped_allreduce" in op.name
               for op in graph.get_operations())


@pytest.mark.parametrize("groups", ["two", "lists", "num_groups"])
def test_groups(groups):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    kernel0, bias0, kernel1, bias1 = model.trainable_variables
    kwargs = {"two": {"groups": 2}, "lists": {"groups": [[kernel0, bias1]]},
              "num_groups": {"num_groups": 2}}[groups]
    if groups == "num_groups":
        with pytest.warns(DeprecationWarning):
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
    else:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
    # Two groups either way: [k0, b0] [k1, b1], or [k0, b1] and the rest one by one (three).
    expected = 3 if groups == "lists" else 2
    assert grouped_reductions(opt, model) == expected
    fit(model, opt, *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.SGD(0.1), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference)


def test_without_groups_one_request_per_gradient():
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    assert grouped_reductions(opt, model) == 0


def test_process_set():
    n, r = hvd.size(), hvd.rank()
    members = list(range(max(n - 1, 1)))  # the last rank is outside when n > 1
    process_set = hvd.add_process_set(members)
    try:
        x, y = data(n)
        model = make_model()
        fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=process_set),
            *shard(x, y), batch=PER_RANK)
        # Members: the members' combined batches; the rank outside: its own batches.
        rows = [shard(x, y, m, n) for m in (members if r in members else [r])]
        cx = np.concatenate([np.stack(np.split(rx, STEPS)) for rx, _ in rows], axis=1)
        cy = np.concatenate([np.stack(np.split(ry, STEPS)) for _, ry in rows], axis=1)
        reference = make_model()
        fit(reference, keras.optimizers.SGD(0.1), cx.reshape(-1, 3), cy.reshape(-1, 1),
            batch=PER_RANK * len(rows))
        assert_weights_close(model, reference)
    finally:
        hvd.remove_process_set(process_set)


def two_layer_model(seed):
    keras.utils.set_random_seed(seed)
    shared = keras.layers.Dense(4, activation="tanh")
    local = keras.layers.Dense(1)
    return keras.Sequential([keras.Input((3,)), shared, local]), shared, local


@pytest.mark.parametrize("scale", [True, False])
def test_partial_optimizer_keeps_local_layers(scale):
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    xs, ys = shard(x, y)
    model, _, local = two_layer_model(seed=7)
    local.set_weights([w + 0.1 * r for w in local.get_weights()])  # differs by rank
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=local,
                                          scale_local_gradients=scale)
    reference, _, ref_local = two_layer_model(seed=7)
    reference.set_weights(model.get_weights())
    fit(model, opt, xs, ys, batch=PER_RANK)

    # By hand: each rank's own gradients; the shared layer's averaged over the ranks, the
    # local layer's kept (divided by n when scaled).
    variables = reference.trainable_variables
    for s in range(STEPS):
        bx, by = xs[s * PER_RANK:(s + 1) * PER_RANK], ys[s * PER_RANK:(s + 1) * PER_RANK]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(reference(bx) - by))
        grads = [g.numpy() for g in tape.gradient(loss, variables)]
        everyone = hvd.allgather_object(grads)
        for i, v in enumerate(variables):
            if any(v is w for w in ref_local.trainable_variables):
                step = grads[i] / (n if scale else 1)
            else:
                step = np.mean([g[i] for g in everyone], axis=0)
            v.assign(v.numpy() - 0.1 * step)
    assert_weights_close(model, reference)


def test_refusals_leave_the_runtime_working():
    with pytest.raises(ValueError, match="Average and Sum"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=0)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="local layers"):
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=["dense"])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="already"):
        hvd.DistributedOptimizer(opt)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer("sgd")
    total = hvd.allreduce(np.float32(1.0), op=hvd.Sum)
    assert float(total) == hvd.size()


def test_custom_loop_with_a_distributed_tape():
    """A DistributedGradientTape's gradients reach apply_gradients reduced once: Keras 2 reduces
    in compute_gradients only (as Horovod), Keras 3 in apply, so there the tape is a plain one."""
    n = hvd.size()
    x, y = data(n)
    xs, ys = shard(x, y)
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Sum)
    for s in range(STEPS):
        bx, by = xs[s * PER_RANK:(s + 1) * PER_RANK], ys[s * PER_RANK:(s + 1) * PER_RANK]
        with tf.GradientTape() as plain:
            loss = tf.reduce_mean(tf.square(model(bx) - by))
        tape = hvd_tf.DistributedGradientTape(plain, op=hvd.Sum) if KERAS2 else plain
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    reference = make_model()
    fit(reference, keras.optimizers.SGD(0.1 * n), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference)


@pytest.mark.parametrize("kind", KINDS)
def test_adasum(kind):
    """One SGD step on each rank's own batch moves by the Adasum of the ranks' gradients, on a
    power-of-two number of ranks (Horovod refuses Adasum with Keras); otherwise refused."""
    n = hvd.size()
    if n & (n - 1):
        with pytest.raises(ValueError, match="power-of-two"):
            hvd.DistributedOptimizer(optimizers(kind).SGD(0.1), op=hvd.Adasum)
        return
    x, y = data(n)
    bx, by = shard(x, y)[0][:PER_RANK], shard(x, y)[1][:PER_RANK]
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    kernel, bias = [w.astype(np.float64) for w in model.get_weights()]
    fit(model, hvd.DistributedOptimizer(optimizers(kind).SGD(0.1), op=hvd.Adasum), bx, by,
        batch=PER_RANK)
    residual = 2 * (bx @ kernel + bias - by) / len(bx)  # the mean squared error's gradients
    everyone = hvd.allgather_object([bx.T @ residual, residual.sum(axis=0)])
    for i, (got, start) in enumerate(zip(model.get_weights(), [kernel, bias])):
        want = start - 0.1 * numpy_adasum([g[i] for g in everyone])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
