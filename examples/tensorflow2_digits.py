#!/usr/bin/env python3
"""Trains a 64-128-64-10 MLP on the digits with TensorFlow 2 and ronde.tensorflow: Horovod's
TF2 recipe (DistributedGradientTape inside a tf.function, variables broadcast from rank 0
after the first step, learning rate scaled by the number of ranks, data sharded by rank).

One process:     python examples/tensorflow2_digits.py
Two processes:   ronde run -np 2 python examples/tensorflow2_digits.py
Exits non-zero below 95% test accuracy.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_local_size = int(os.environ.get("RONDE_LOCAL_SIZE", os.environ.get("HOROVOD_LOCAL_SIZE", "1")))
_threads = max(1, (os.cpu_count() or 1) // max(1, _local_size))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ronde.tensorflow as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--fp16-allreduce", action="store_true")
    args = parser.parse_args()

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(_threads)
    tf.random.set_seed(42 + hvd.rank())  # different on purpose: the broadcast fixes it
    verbose = hvd.rank() == 0

    train_x, train_y, test_x, test_y = load_digits()
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]
    steps_per_epoch = -(-len(train_x) // (args.batch_size * hvd.size()))

    model = tf.keras.Sequential([tf.keras.Input((64,)),
                                 tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    @tf.function
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        # Horovod's recipe: after the first step, when the optimizer has its variables, every
        # rank takes rank 0's model and optimizer state.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
        return loss

    if verbose:
        print("training on %d rank(s): %d train / %d test examples, %d steps per epoch"
              % (hvd.size(), len(train_x), len(test_x), steps_per_epoch), flush=True)
    rng = np.random.RandomState(42)
    test_accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        began = time.time()
        order = rng.permutation(len(shard_y))
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            batch = order[(step * args.batch_size) % len(order):][:args.batch_size]
            loss = train_step(tf.constant(shard_x[batch]), tf.constant(shard_y[batch]),
                              epoch == 1 and step == 0)
            loss_sum += float(loss)
        logits = model(test_x[hvd.rank()::hvd.size()], training=False)
        correct = np.sum(np.argmax(logits, 1) == test_y[hvd.rank()::hvd.size()])
        totals = hvd.allreduce(tf.constant([loss_sum / steps_per_epoch, correct], tf.float64),
                               op=hvd.Sum, name="metrics").numpy()
        test_accuracy = totals[1] / len(test_y)
        if verbose:
            print("epoch %2d/%d loss %.4f  test accuracy %.2f%%  (%.2fs)"
                  % (epoch, args.epochs, totals[0] / hvd.size(), 100 * test_accuracy,
                     time.time() - began), flush=True)

    digest = hvd.allgather(tf.constant([sum(float(tf.reduce_sum(tf.cast(v, tf.float64)))
                                            for v in model.variables)])).numpy()
    if verbose:
        print("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s"
              % (100 * test_accuracy, hvd.size(), bool(np.allclose(digest, digest[0]))),
              flush=True)
    hvd.shutdown()
    return 0 if test_accuracy >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
