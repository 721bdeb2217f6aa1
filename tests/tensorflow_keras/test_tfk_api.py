"""Horovod 0.28.1's horovod.tensorflow.keras names and signatures resolve here, and its
keras-level collectives take values and return evaluated results."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow.keras as hvd

# Every public name of horovod/tensorflow/keras/__init__.py and its callbacks module (elastic
# is built elsewhere), read from Horovod 0.28.1's source.
HOROVOD_NAMES = """init shutdown is_initialized start_timeline stop_timeline size local_size
cross_size rank local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled
gloo_built ProcessSet global_process_set add_process_set remove_process_set nccl_built
ddl_built ccl_built cuda_built rocm_built Average Sum Compression callbacks
DistributedOptimizer broadcast_global_variables allreduce allgather broadcast reducescatter
load_model""".split()
HOROVOD_CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
                     "LearningRateScheduleCallback", "LearningRateWarmupCallback",
                     "BestModelCheckpoint"]

C, A, G = "Compression.none", "Average", "global_process_set"
# name -> Horovod's parameters as (name, default); no default: required.
HOROVOD_SIGNATURES = {
    "DistributedOptimizer": [("optimizer",), ("name", None), ("device_dense", ""),
                             ("device_sparse", ""), ("compression", C),
                             ("sparse_as_dense", False), ("gradient_predivide_factor", 1.0),
                             ("op", A), ("backward_passes_per_step", 1),
                             ("average_aggregated_gradients", False), ("num_groups", 0),
                             ("groups", None), ("process_set", G),
                             ("scale_local_gradients", True)],
    "broadcast_global_variables": [("root_rank",)],
    "allreduce": [("value",), ("name", None), ("average", None), ("prescale_factor", 1.0),
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
    "callbacks.BestModelCheckpoint": [("monitor", "val_loss"), ("verbose", 0),
                                      ("save_weights_only", False), ("mode", "auto"),
                                      ("save_freq", "epoch")],
}
SYMBOLS = {C: hvd.Compression.none, A: hvd.Average, G: hvd.global_process_set}


def positional_parameters(target):
    """Parameters that can be passed by position (keyword-only ones are ronde's additions)."""
    function = target.__init__ if inspect.isclass(target) else target
    params = list(inspect.signature(function).parameters.values())
    if inspect.isclass(target):
        params = params[1:]
    return [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]


def test_every_horovod_name_resolves():
    assert [n for n in HOROVOD_NAMES if not hasattr(hvd, n)] == []
    assert [n for n in HOROVOD_CALLBACKS if not hasattr(hvd.callbacks, n)] == []
    assert hvd.Compression.none is not None and hvd.Compression.fp16 is not None


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_signature_matches_horovod(name):
    target = hvd
    for part in name.split("."):
        target = getattr(target, part)
    got = positional_parameters(target)
    want = HOROVOD_SIGNATURES[name]
    assert [p.name for p in got] == [w[0] for w in want]
    for param, expected in zip(got, want):
        if len(expected) == 1:
            assert param.default is inspect.Parameter.empty, param.name
        else:
            assert param.default == SYMBOLS.get(expected[1], expected[1]), param.name


def test_keras_level_collectives():
    n, r = hvd.size(), hvd.rank()
    mine = np.arange(6, dtype=np.float32).reshape(3, 2) + r
    everyone = [np.arange(6, dtype=np.float32).reshape(3, 2) + k for k in range(n)]
    total = np.sum(everyone, axis=0)
    np.testing.assert_allclose(hvd.allreduce(mine), total / n, rtol=1e-6)
    np.testing.assert_allclose(hvd.allreduce(mine, name="summed", op=hvd.Sum), total)
    np.testing.assert_allclose(hvd.allreduce(mine, average=False, prescale_factor=2.0,
                                             postscale_factor=0.5), total)
    np.testing.assert_allclose(hvd.allreduce(mine, compression=hvd.Compression.fp16),
                               total / n, rtol=1e-3)
    gathered = hvd.allgather(np.full((r + 1, 2), r, np.int32))
    np.testing.assert_array_equal(gathered, np.concatenate(
        [np.full((k + 1, 2), k, np.int32) for k in range(n)]))
    for root in range(n):
        np.testing.assert_array_equal(hvd.broadcast(mine, root), everyone[root])
    rows = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) * (r + 1)
    share = hvd.reducescatter(rows, op=hvd.Sum)
    full = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) * sum(range(1, n + 1))
    np.testing.assert_allclose(share, full[2 * r:2 * r + 2])
    assert isinstance(hvd.allreduce(mine), tf.Tensor)  # eager: the result tensor, as Horovod


def test_refusals_leave_the_runtime_working():
    with pytest.raises(RuntimeError, match="eager"):
        hvd.broadcast_global_variables(0)
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(1.0, average=True, op=hvd.Sum)
    assert float(hvd.allreduce(np.float32(1.0), op=hvd.Sum)) == hvd.size()
