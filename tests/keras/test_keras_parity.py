"""ronde.keras against Horovod 0.28.1's horovod.keras on the backend in KERAS_BACKEND: its names
and signatures, explicit gradient groups, local layers, process sets, the keras-level
collectives, and mixed precision with fp16 and fp32 gradients side by side."""

import inspect

import keras
import numpy as np
import pytest

import ronde.keras as hvd
from test_keras import PER_RANK, assert_weights_close, data, fit, make_model, shard

# Every public name of horovod/keras/__init__.py and its callbacks module (elastic is built
# elsewhere), read from Horovod 0.28.1's source.
HOROVOD_NAMES = """init shutdown size local_size cross_size rank local_rank cross_rank
is_initialized start_timeline stop_timeline mpi_threads_supported mpi_enabled mpi_built
gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built Average Sum Adasum
Compression global_process_set callbacks DistributedOptimizer PartialDistributedOptimizer
broadcast_global_variables allreduce allgather broadcast reducescatter load_model""".split()
HOROVOD_CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
                     "LearningRateScheduleCallback", "LearningRateWarmupCallback",
                     "BestModelCheckpoint"]
C, A, G = "Compression.none", "Average", "global_process_set"
COMMON = [("optimizer",), ("name", None), ("device_dense", ""), ("device_sparse", ""),
          ("compression", C), ("sparse_as_dense", False), ("gradient_predivide_factor", 1.0),
          ("op", A)]
HOROVOD_SIGNATURES = {
    "DistributedOptimizer": COMMON + [("num_groups", 0), ("groups", None)],
    "PartialDistributedOptimizer": COMMON + [("groups", None), ("process_set", G),
                                             ("local_layers", None),
                                             ("scale_local_gradients", True)],
    "broadcast_global_variables": [("root_rank",)],
    "allreduce": [("value",), ("name", None), ("average", True), ("prescale_factor", 1.0),
                  ("postscale_factor", 1.0), ("op", None), ("compression", C)],
    "allgather": [("value",), ("name", None)],
    "broadcast": [("value",), ("root_rank",), ("name", None)],
    "reducescatter": [("value",), ("name", None), ("op", A)],
    "load_model": [("filepath",), ("custom_optimizers", None), ("custom_objects", None),
                   ("compression", C), ("legacy_opts", False)],
    "callbacks.BroadcastGlobalVariablesCallback": [("root_rank",), ("device", ""),
                                                   ("local_variables", None)],
    "callbacks.MetricAverageCallback": [("device", "")],
    "callbacks.LearningRateScheduleCallback": [
        ("initial_lr",), ("multiplier",), ("start_epoch", 0), ("end_epoch", None),
        ("staircase", True), ("momentum_correction", True), ("steps_per_epoch", None)],
    "callbacks.LearningRateWarmupCallback": [
        ("initial_lr",), ("warmup_epochs", 5), ("momentum_correction", True),
        ("steps_per_epoch", None), ("verbose", 0)],
    "callbacks.BestModelCheckpoint": [("monitor", "val_loss"), ("verbose", 0), ("mode", "auto"),
                                      ("save_freq", "epoch")],
}
SYMBOLS = {C: hvd.Compression.none, A: hvd.Average, G: hvd.global_process_set}


def test_every_horovod_name_resolves():
    assert [n for n in HOROVOD_NAMES if not hasattr(hvd, n)] == []
    assert [n for n in HOROVOD_CALLBACKS if not hasattr(hvd.callbacks, n)] == []


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_signature_matches_horovod(name):
    target = hvd
    for part in name.split("."):
        target = getattr(target, part)
    function = target.__init__ if inspect.isclass(target) else target
    params = [p for p in inspect.signature(function).parameters.values()
              if p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self"]
    want = HOROVOD_SIGNATURES[name]
    assert [p.name for p in params] == [w[0] for w in want]
    for param, expected in zip(params, want):
        if len(expected) == 1:
            assert param.default is inspect.Parameter.empty, param.name
        else:
            assert param.default == SYMBOLS.get(expected[1], expected[1]), param.name


@pytest.mark.parametrize("groups", [1, 2, "lists"])
def test_groups(groups):
    n = hvd.size()
    x, y = data(n)
    model = make_model()
    if groups == "lists":
        kernel0, _, _, bias1 = model.trainable_variables
        groups = [[bias1, kernel0]]
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=groups),
        *shard(x, y), batch=PER_RANK)
    reference = make_model()
    fit(reference, keras.optimizers.SGD(0.1), x, y, batch=PER_RANK * n)
    assert_weights_close(model, reference)


def test_sum_and_predivide():
    n = hvd.size()
    x, y = data(n)
    summed, divided = make_model(), make_model()
    fit(summed, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Sum), *shard(x, y),
        batch=PER_RANK)
    fit(divided, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                          gradient_predivide_factor=4.0), *shard(x, y),
        batch=PER_RANK)
    reference, reference_sum = make_model(), make_model()
    fit(reference, keras.optimizers.SGD(0.1), x, y, batch=PER_RANK * n)
    fit(reference_sum, keras.optimizers.SGD(0.1 * n), x, y, batch=PER_RANK * n)
    assert_weights_close(divided, reference)
    assert_weights_close(summed, reference_sum)


def two_layer_model(seed=7):
    keras.utils.set_random_seed(seed)
    shared, local = keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)
    return keras.Sequential([keras.Input((3,)), shared, local]), shared, local


@pytest.mark.parametrize("scale", [True, False])
def test_partial_optimizer(scale):
    """One SGD step: the shared layer moves by the ranks' mean gradient, the local layer by its
    own gradient (divided by the number of ranks when scaled)."""
    n, r = hvd.size(), hvd.rank()
    x, y = data(n)
    bx, by = shard(x, y)[0][:PER_RANK], shard(x, y)[1][:PER_RANK]
    model, shared, local = two_layer_model()
    local.set_weights([w + 0.1 * r for w in local.get_weights()])
    start = [w.copy() for w in model.get_weights()]
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local],
                                          scale_local_gradients=scale)
    fit(model, opt, bx, by, batch=PER_RANK)
    # The gradients by finite differences of this rank's loss, one weight at a time.
    probe, _, _ = two_layer_model()

    def loss(weights):
        probe.set_weights(weights)
        return float(np.mean((keras.ops.convert_to_numpy(probe(bx)) - by) ** 2))
    grads = []
    for i, w in enumerate(start):
        g = np.zeros_like(w)
        for idx in np.ndindex(w.shape):
            up = [v.copy() for v in start]
            down = [v.copy() for v in start]
            up[i][idx] += 1e-3
            down[i][idx] -= 1e-3
            g[idx] = (loss(up) - loss(down)) / 2e-3
        grads.append(g)
    everyone = hvd.allgather_object(grads)
    expected = [start[i] - 0.1 * (np.mean([g[i] for g in everyone], axis=0) if i < 2
                                  else grads[i] / (n if scale else 1))
                for i in range(len(start))]
    for got, want in zip(model.get_weights(), expected):
        np.testing.assert_allclose(got, want, atol=2e-4)


def test_keras_level_collectives():
    n, r = hvd.size(), hvd.rank()
    mine = np.arange(4, dtype=np.float32).reshape(2, 2) + r
    total = sum(np.arange(4, dtype=np.float32).reshape(2, 2) + k for k in range(n))
    out = hvd.allreduce(mine)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), total / n, rtol=1e-6)
    assert keras.ops.is_tensor(out)  # a tensor of the backend
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        hvd.allreduce(mine, average=None, op=hvd.Sum, prescale_factor=2.0,
                      postscale_factor=0.25)), total / 2)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        hvd.allreduce(mine, compression=hvd.Compression.fp16)), total / n, rtol=1e-3)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(
        hvd.allgather(np.full((r + 1,), r, np.int32))),
        np.concatenate([np.full((k + 1,), k, np.int32) for k in range(n)]))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(hvd.broadcast(mine, n - 1)),
                                  mine - r + n - 1)
    share = hvd.reducescatter(np.ones((n, 2), np.float32), op=hvd.Sum)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(share), [[n, n]])


def test_broadcast_global_variables_and_refusals():
    r = hvd.rank()
    with pytest.raises(RuntimeError, match="eager"):
        hvd.broadcast_global_variables(0)
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(1.0, op=hvd.Sum)  # average=True by default, as in Horovod
    with pytest.raises(ValueError, match="Average and Sum"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="legacy"):
        hvd.load_model("unused.keras", legacy_opts=True)
    if keras.backend.backend() == "jax":  # its stateless step bypasses the accumulation
        with pytest.raises(ValueError, match="LossScaleOptimizer"):
            hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(
                keras.optimizers.SGD(0.1)), backward_passes_per_step=2)
    model = make_model(seed=30 + r)
    hvd.broadcast_global_variables(0, model=model)
    weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
    assert all(w == weights[0] for w in weights)


def mixed_model(seed=13):
    """A float16 layer (float16 variables and gradients) between mixed_float16 ones."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(4, activation="tanh", dtype="float16"),
                             keras.layers.Dense(1, dtype="float32")])


@pytest.mark.parametrize("groups", [None, 1])
def test_mixed_precision(groups):
    n = hvd.size()
    x, y = data(n)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = mixed_model()
        assert {v.dtype for v in model.trainable_variables} == {"float16", "float32"}
        inner = keras.optimizers.SGD(0.1)
        opt = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(inner,
                                                                           initial_scale=256),
                                       groups=groups)
        fit(model, opt, *shard(x, y), batch=PER_RANK, epochs=2)
        reference = mixed_model()
        fit(reference, keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1),
                                                           initial_scale=256),
            x, y, batch=PER_RANK * n, epochs=2)
        start = mixed_model()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert min(np.abs(w - w0).max() for w, w0 in zip(model.get_weights(),
                                                     start.get_weights())) > 1e-3
    assert_weights_close(model, reference, tol=5e-3)


def numpy_adasum(tensors):
    """Adasum of the ranks' tensors in rank order: pairs (0,1), (2,3), ..., then pairs of pairs;
    a' = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b."""
    tensors = [np.asarray(t, np.float64) for t in tensors]
    while len(tensors) > 1:
        combined = []
        for a, b in zip(tensors[0::2], tensors[1::2]):
            dot, aa, bb = float((a * b).sum()), float((a * a).sum()), float((b * b).sum())
            combined.append((1 - dot / (2 * aa) if aa > 0 else 1) * a
                            + (1 - dot / (2 * bb) if bb > 0 else 1) * b)
        tensors = combined
    return tensors[0]


def linear_gradients(weights, x, y):
    """Gradients of the mean squared error of x @ kernel + bias, by hand."""
    kernel, bias = weights
    residual = 2 * (x @ kernel + bias - y) / len(x)
    return [x.T @ residual, residual.sum(axis=0)]


def test_adasum():
    """One SGD step on each rank's own batch moves by the Adasum of the ranks' gradients, on a
    power-of-two number of ranks; on another number the optimizer is refused at once."""
    n = hvd.size()
    if n & (n - 1):
        with pytest.raises(ValueError, match="power-of-two"):
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
        return
    x, y = data(n)
    bx, by = shard(x, y)[0][:PER_RANK], shard(x, y)[1][:PER_RANK]
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    start = [w.astype(np.float64) for w in model.get_weights()]
    fit(model, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum), bx, by,
        batch=PER_RANK)
    everyone = hvd.allgather_object(linear_gradients(start, bx.astype(np.float64), by))
    for i, got in enumerate(model.get_weights()):
        want = start[i] - 0.1 * numpy_adasum([g[i] for g in everyone])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
