"""What each rank of a TorchEstimator.fit runs (inside ronde.spark.run): read its own shard
of the Parquet data, train with ronde.torch, and on rank 0 save the model in the store."""

import io
import math
import os

from ronde.spark import _data


def _threads_per_rank():
    local_size = int(os.environ.get("RONDE_LOCAL_SIZE", "1"))
    return max(1, (os.cpu_count() or 1) // max(1, local_size))


def read_shard(store, data_path, rank, size, columns):
    return _data.read_shard(store, data_path, rank, size, columns, "TorchEstimator")


def to_tensors(table, feature_cols, label_cols):
    """The shard as torch tensors: float32 features (rows, width), one tensor per label."""
    import torch
    features, labels = _data.to_numpy(table, feature_cols, label_cols)
    return (None if features is None else torch.from_numpy(features),
            [torch.from_numpy(y) for y in labels])


def _loss_of(loss_fns, outputs, labels):
    # A model with a tuple of outputs pairs output i with label column i.
    if not isinstance(outputs, (tuple, list)):
        outputs = [outputs] * len(labels)
    total = 0
    for loss_fn, output, label in zip(loss_fns, outputs, labels):
        total = total + loss_fn(output, label)
    return total


def train(spec):
    """Trains on this rank's shard; returns the history (rank 0's is the run's)."""
    import torch
    from pyspark import cloudpickle
    import ronde.torch as hvd

    torch.set_num_threads(_threads_per_rank())
    torch.manual_seed(spec["seed"])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model, optimizer = cloudpickle.loads(spec["model_and_optimizer"])
    loss_fns = spec["loss_fns"]
    store = spec["store"]
    columns = spec["feature_cols"] + spec["label_cols"]
    train_x, train_y = to_tensors(read_shard(store, spec["train_path"], rank, size, columns),
                                  spec["feature_cols"], spec["label_cols"])
    val = None
    if spec["val_path"] is not None:
        val = to_tensors(read_shard(store, spec["val_path"], rank, size, columns),
                         spec["feature_cols"], spec["label_cols"])

    # Every rank takes the same number of steps (a collective per step): the largest shard
    # sets it, and smaller shards wrap around.
    counts = hvd.allgather(torch.tensor([len(train_x)], dtype=torch.int64))
    if int(counts.min()) == 0:
        raise ValueError("TorchEstimator: rank %d has no training rows (shard sizes %s); "
                         "give fit() more rows than num_proc" % (rank, counts.tolist()))
    batch_size = spec["batch_size"]
    steps = max(1, math.ceil(int(counts.max()) / batch_size))

    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * size  # the Horovod recipe: scale by the number of ranks
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    history = []
    generator = torch.Generator().manual_seed(spec["seed"] + rank)
    for epoch in range(spec["epochs"]):
        model.train()
        order = torch.randperm(len(train_x), generator=generator)
        order = order.repeat(math.ceil(steps * batch_size / len(order)))
        total = 0.0
        for step in range(steps):
            index = order[step * batch_size:(step + 1) * batch_size]
            optimizer.zero_grad()
            loss = _loss_of(loss_fns, model(train_x[index]), [y[index] for y in train_y])
            loss.backward()
            optimizer.step()
            total += loss.item()
        metrics = {"epoch": epoch,
                   "train_loss": hvd.allreduce(torch.tensor(total / steps), name="train_loss")
                   .item()}
        if val is not None:
            metrics.update(_validate(model, loss_fns, val, hvd))
        history.append(metrics)
        if spec["verbose"] >= 1 and rank == 0:
            print("TorchEstimator epoch %d/%d: %s" % (epoch + 1, spec["epochs"], ", ".join(
                "%s=%.4f" % (k, v) for k, v in metrics.items() if k != "epoch")), flush=True)
        for callback in spec["callbacks"]:
            callback(epoch, dict(metrics))

    if rank == 0:
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        store.write_bytes(spec["model_path"], cloudpickle.dumps({
            "model": model, "state_dict": buffer.getvalue(), "history": history,
            "feature_cols": spec["feature_cols"], "label_cols": spec["label_cols"],
            "output_cols": spec["output_cols"]}))
    # Every rank's final parameters, so fit() can check that they agree.
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    hvd.shutdown()
    return {"history": history, "checksum": checksum}


def _validate(model, loss_fns, val, hvd):
    import torch
    x, ys = val
    model.eval()
    with torch.no_grad():
        if len(x):
            outs = model(x)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs] * len(ys)
            out = outs[0]
            loss_sum = float(sum(fn(o, y, reduction="sum") if _takes_reduction(fn)
                                 else fn(o, y) * len(y) for fn, o, y in zip(loss_fns, outs, ys)))
            correct = float((out.argmax(1) == ys[0]).sum()) if out.dim() == 2 and \
                out.shape[1] > 1 and ys[0].dtype == torch.int64 else None
        else:
            loss_sum, correct = 0.0, 0.0
    totals = hvd.allreduce(torch.tensor([loss_sum, float(len(x)), correct or 0.0],
                                        dtype=torch.float64), op=hvd.Sum, name="val_metrics")
    metrics = {"val_loss": float(totals[0] / max(totals[1], 1))}
    if correct is not None:
        metrics["val_accuracy"] = float(totals[2] / max(totals[1], 1))
    return metrics


def _takes_reduction(fn):
    import inspect
    try:
        return "reduction" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
