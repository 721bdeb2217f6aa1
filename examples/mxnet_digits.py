#!/usr/bin/env python3
"""Trains a Gluon MLP on the handwritten digits that scikit-learn ships, with ronde.mxnet.

One process:     .venv-mxnet/bin/python examples/mxnet_digits.py
Two processes:   ronde run -np 2 .venv-mxnet/bin/python examples/mxnet_digits.py

Horovod's MXNet recipe: init, shard the data by rank, scale the learning rate by the number
of ranks, DistributedTrainer, broadcast the initial parameters from rank 0, average the
metrics. Exits 1 when the final test accuracy is below --min-accuracy.
"""

import argparse
import gzip
import os
import sys

_local_size = int(os.environ.get("RONDE_LOCAL_SIZE", os.environ.get("HOROVOD_LOCAL_SIZE", "1")))
_threads = max(1, (os.cpu_count() or 1) // max(1, _local_size))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS"):
    os.environ.setdefault(_var, str(_threads))

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import ronde.mxnet as hvd  # noqa: E402


def digits_path():
    """scikit-learn's copy of the data: Debian's python3-sklearn, else this interpreter's."""
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        found = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                             "digits.csv.gz")
        if os.path.exists(found):
            return found
    return "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def load_digits(path, test_fraction=0.2, seed=0):
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = table[:, :64] / 16.0
    y = table[:, 64].astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--data", default=digits_path())
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    args = parser.parse_args()

    hvd.init()
    mx.random.seed(42 + hvd.rank())  # different on purpose: the broadcast fixes it
    verbose = hvd.rank() == 0
    train_x, train_y, test_x, test_y = load_digits(args.data)
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]
    steps_per_epoch = -(-len(train_x) // (args.batch_size * hvd.size()))

    net = mx.gluon.nn.Sequential()
    net.add(mx.gluon.nn.Dense(128, activation="relu"), mx.gluon.nn.Dense(64, activation="relu"),
            mx.gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 64)))  # run deferred initialization before the broadcast
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": args.lr * hvd.size(),
                                                     "momentum": 0.9},
                                     compression=compression)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(7)
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(shard_y))
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            batch = order[(step * args.batch_size) % len(order):][:args.batch_size]
            x, y = mx.nd.array(shard_x[batch]), mx.nd.array(shard_y[batch])
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(len(batch))
            loss_sum += float(loss.sum().asscalar())
        mine = slice(hvd.rank(), None, hvd.size())
        predictions = net(mx.nd.array(test_x[mine])).argmax(axis=1).asnumpy()
        correct = float((predictions == test_y[mine]).sum())
        totals = hvd.allreduce(mx.nd.array([loss_sum, correct], dtype=np.float64), op=hvd.Sum,
                               name="metrics").asnumpy()
        accuracy = totals[1] / len(test_y)
        if verbose:
            print("epoch %2d/%d  loss %.4f  test accuracy %.2f%%"
                  % (epoch, args.epochs, totals[0] / len(train_y), 100 * accuracy), flush=True)
    flat = np.concatenate([p.data().asnumpy().reshape(-1) for _, p in sorted(params.items())])
    digest = hvd.allgather(mx.nd.array([[float(flat.astype(np.float64).sum())]],
                                       dtype=np.float64)).asnumpy()
    if verbose:
        print("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s"
              % (100 * accuracy, hvd.size(), bool(np.all(digest == digest[0]))), flush=True)
    hvd.shutdown()
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
