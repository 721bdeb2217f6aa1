#!/usr/bin/env python3
"""Trains a 64-128-64-10 MLP on the digits with Keras 2 (tf_keras) as Horovod-era scripts do:
`tf.keras` under TF_USE_LEGACY_KERAS=1, `import ronde.tensorflow.keras as hvd` where they had
`horovod.tensorflow.keras`, a legacy SGD with momentum in DistributedOptimizer, the
broadcast, metric-average and warmup callbacks (momentum corrected), the best model written by
rank 0 and loaded back with hvd.load_model. --graph runs it in TF1 graph mode
(tf.compat.v1.disable_eager_execution()), as older scripts did.

Two processes:   TF_USE_LEGACY_KERAS=1 ronde run -np 2 python examples/tf_keras_digits.py
Exits non-zero below 95% test accuracy, or when tf.keras is not Keras 2.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--checkpoint", default="/tmp/ronde_tf_keras_digits.h5")
    parser.add_argument("--graph", action="store_true", help="TF1 graph mode")
    args = parser.parse_args()
    if args.graph:
        tf.compat.v1.disable_eager_execution()
    import ronde.tensorflow.keras as hvd
    from ronde.tensorflow.keras.world import tf_keras_is_keras2
    if not tf_keras_is_keras2():
        print("tf.keras is Keras 3 here: set TF_USE_LEGACY_KERAS=1 (tf_keras installed)")
        return 2
    keras = tf.keras

    hvd.init()
    keras.utils.set_random_seed(42 + hvd.rank())  # different on purpose: the broadcast fixes it
    verbose = hvd.rank() == 0
    train_x, train_y, test_x, test_y = load_digits()
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]
    steps = len(train_x) // (args.batch_size * hvd.size())  # the same on every rank
    shard_x, shard_y = shard_x[:steps * args.batch_size], shard_y[:steps * args.batch_size]

    model = keras.Sequential([keras.layers.Dense(128, activation="relu", input_shape=(64,)),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    scaled_lr = args.lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    checkpoint = hvd.broadcast_object(args.checkpoint, root_rank=0)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(scaled_lr, warmup_epochs=3),
                 hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=checkpoint)]
    if verbose:
        print("training on %d rank(s), tf_keras %s mode: %d train / %d test examples"
              % (hvd.size(), "graph" if args.graph else "eager", len(train_x), len(test_x)),
              flush=True)
    model.fit(shard_x, shard_y, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=2 if verbose else 0)

    hvd.allgather_object(None)  # rank 0 has written the checkpoint
    best = hvd.load_model(checkpoint, legacy_opts=True)
    test_accuracy = float(np.mean(np.argmax(best.predict(test_x, verbose=0), 1) == test_y))
    digests = hvd.allgather_object(float(sum(np.sum(w, dtype=np.float64)
                                             for w in model.get_weights())))
    if verbose:
        print("best model's test accuracy %.2f%% on %d rank(s); parameters identical on all "
              "ranks: %s" % (100 * test_accuracy, hvd.size(),
                             bool(np.allclose(digests, digests[0]))), flush=True)
    hvd.shutdown()
    return 0 if test_accuracy >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
