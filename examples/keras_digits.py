#!/usr/bin/env python3
"""Trains a 64-128-64-10 MLP on the digits with Keras 3 model.fit and ronde.keras, on any
backend Keras runs on (KERAS_BACKEND=tensorflow, torch or jax): Horovod's Keras recipe
(DistributedOptimizer, BroadcastGlobalVariablesCallback, MetricAverageCallback,
LearningRateWarmupCallback, checkpoints on rank 0 only, data sharded by rank).

One process:     KERAS_BACKEND=torch python examples/keras_digits.py
Two processes:   KERAS_BACKEND=torch ronde run -np 2 python examples/keras_digits.py
Exits non-zero below 95% test accuracy.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import ronde.keras as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--checkpoint", default="/tmp/ronde_keras_digits.keras")
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(42 + hvd.rank())  # different on purpose: the broadcast fixes it
    verbose = hvd.rank() == 0

    train_x, train_y, test_x, test_y = load_digits()
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]
    steps_per_epoch = -(-len(train_x) // (args.batch_size * hvd.size()))
    # Every rank runs the same number of steps: the shards differ by at most one example.
    shard_x, shard_y = shard_x[:steps_per_epoch * args.batch_size], shard_y[
        :steps_per_epoch * args.batch_size]

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    scaled_lr = args.lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(scaled_lr, warmup_epochs=3,
                                                          momentum_correction=False),
                 hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=args.checkpoint)]
    if verbose:
        print("training on %d rank(s) with the %s backend: %d train / %d test examples"
              % (hvd.size(), keras.backend.backend(), len(train_x), len(test_x)), flush=True)
    model.fit(shard_x, shard_y, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=2 if verbose else 0)

    logits = keras.ops.convert_to_numpy(model.predict(test_x, verbose=0))
    test_accuracy = float(np.mean(np.argmax(logits, 1) == test_y))
    digests = hvd.allgather_object(float(sum(np.sum(w, dtype=np.float64)
                                             for w in model.get_weights())))
    if verbose:
        print("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s"
              % (100 * test_accuracy, hvd.size(), bool(np.allclose(digests, digests[0]))),
              flush=True)
    hvd.shutdown()
    return 0 if test_accuracy >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
