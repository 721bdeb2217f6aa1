"""What each rank of a KerasEstimator.fit runs (inside ronde.spark.run): read its own shard of
the Parquet data, train with ronde.keras (DistributedOptimizer, BroadcastGlobalVariablesCallback,
MetricAverageCallback) on the Keras backend the driver uses, and on rank 0 save the model in the
store. Keras is imported only here and in the executors, after KERAS_BACKEND is set."""

import json
import math
import os
import tempfile


def _threads_per_rank():
    local_size = int(os.environ.get("RONDE_LOCAL_SIZE", "1"))
    return max(1, (os.cpu_count() or 1) // max(1, local_size))


def model_to_bytes(model):
    """The model as the bytes of a .keras file (architecture, weights, compile settings)."""
    with tempfile.TemporaryDirectory(prefix="ronde_keras_") as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def model_from_bytes(data, custom_objects=None, compile=True):
    import keras
    with tempfile.TemporaryDirectory(prefix="ronde_keras_") as folder:
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as f:
            f.write(data)
        return keras.models.load_model(path, custom_objects=custom_objects, compile=compile)


def use_backend(backend, who):
    """Makes `import keras` use `backend`; a process that imported Keras on another backend
    cannot switch, which is said rather than run on the wrong one."""
    import sys
    if "keras" in sys.modules:
        loaded = sys.modules["keras"].backend.backend()
        if loaded != backend:
            raise RuntimeError("%s: this process runs Keras on the %s backend, the model needs %s"
                               % (who, loaded, backend))
    os.environ["KERAS_BACKEND"] = backend


def scaled_optimizer_config(config, size):
    """Horovod's recipe: the learning rate times the number of ranks (a schedule is kept)."""
    config = json.loads(json.dumps(config))
    rate = config["config"].get("learning_rate")
    if isinstance(rate, (int, float)):
        config["config"]["learning_rate"] = float(rate) * size
    return config


def _equal_steps(x, ys, batch_size, rank, counts, seed):
    """Every rank takes the same number of steps (each is a collective): the largest shard
    sets it and smaller shards wrap around, in a shuffled order so no rows are favoured."""
    import numpy as np
    steps = max(1, math.ceil(int(counts.max()) / batch_size))
    order = np.random.default_rng(seed + rank).permutation(len(x))
    index = np.resize(order, steps * batch_size)
    return x[index], [y[index] for y in ys], steps


def _labels(ys):
    return ys[0] if len(ys) == 1 else list(ys)


def train(spec):
    """Trains on this rank's shard; returns the history (rank 0's is the run's)."""
    import numpy as np
    use_backend(spec["backend"], "KerasEstimator")
    import keras
    import ronde.keras as hvd
    from ronde.common import numpy_ops as nops
    from ronde.spark import _data

    if spec["backend"] == "torch":
        import torch
        torch.set_num_threads(_threads_per_rank())
    keras.utils.set_random_seed(spec["seed"])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    custom_objects = spec["custom_objects"]
    store = spec["store"]
    feature_cols, label_cols = spec["feature_cols"], spec["label_cols"]
    columns = feature_cols + label_cols
    who = "KerasEstimator"
    x, ys = _data.to_numpy(_data.read_shard(store, spec["train_path"], rank, size, columns, who),
                           feature_cols, label_cols)
    counts = nops.allgather(np.array([len(x)], dtype=np.int64), "keras_estimator.train_rows").wait()
    if int(counts.min()) == 0:
        raise ValueError("KerasEstimator: rank %d has no training rows (shard sizes %s); give "
                         "fit() more rows than num_proc" % (rank, counts.tolist()))
    x, ys, _ = _equal_steps(x, ys, spec["batch_size"], rank, counts, spec["seed"])
    validation_data = None
    if spec["val_path"] is not None:
        vx, vys = _data.to_numpy(_data.read_shard(store, spec["val_path"], rank, size, columns,
                                                  who), feature_cols, label_cols)
        val_counts = nops.allgather(np.array([len(vx)], dtype=np.int64),
                                    "keras_estimator.val_rows").wait()
        # The ranks average their validation metrics at each epoch's end: all must have some.
        if int(val_counts.min()) == 0:
            raise ValueError("KerasEstimator: rank %d has no validation rows (shard sizes %s); "
                             "give fit() more validation rows than num_proc"
                             % (rank, val_counts.tolist()))
        validation_data = (vx, _labels(vys))

    model = model_from_bytes(spec["model"], custom_objects, compile=False)
    optimizer = keras.optimizers.deserialize(scaled_optimizer_config(spec["optimizer"], size),
                                             custom_objects=custom_objects)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer), loss=spec["loss"],
                  loss_weights=spec["loss_weights"], metrics=spec["metrics"])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback()] + list(spec["callbacks"])
    fitted = model.fit(x, _labels(ys), batch_size=spec["batch_size"], epochs=spec["epochs"],
                       shuffle=True, validation_data=validation_data,
                       validation_batch_size=spec["val_batch_size"], callbacks=callbacks,
                       verbose=spec["verbose"] if rank == 0 else 0)
    history = {k: [float(v) for v in values] for k, values in fitted.history.items()}

    if rank == 0:
        store.write_bytes(store.keras_model_path(spec["run_id"]), model_to_bytes(model))
        store.write_bytes(store.keras_metadata_path(spec["run_id"]), json.dumps({
            "backend": spec["backend"], "feature_cols": feature_cols, "label_cols": label_cols,
            "output_cols": spec["output_cols"], "history": history}).encode())
    # Every rank's final weights, so fit() can check that they agree.
    checksum = float(sum(np.asarray(keras.ops.convert_to_numpy(w), dtype=np.float64).sum()
                         for w in model.weights))
    hvd.shutdown()
    return {"history": history, "checksum": checksum}
