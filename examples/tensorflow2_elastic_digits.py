#!/usr/bin/env python3
"""Elastic training of the digits MLP with TensorFlow 2: workers may die or join while
training goes on (Horovod's TF2 elastic recipe on ronde.tensorflow).

    ronde run -np 3 --min-np 2 --max-np 3 --host-discovery-script ./discover_hosts.sh \\
        python examples/tensorflow2_elastic_digits.py

A custom loop: DistributedGradientTape inside a tf.function, the model and optimizer in a
hvd.elastic.TensorFlowKerasState with the loop's position (epoch, offset into the epoch's
permutation of the samples, step), committed every few steps. Kill a worker and the others
roll back to their last commit, re-form without it and go on; when discovery offers a slot
again a new worker starts, receives the state from a survivor and joins at the next commit.
The position is counted in samples, not batches, so a world of another size resumes on the
first sample not yet taken. See docs/elastic.md.

Lines starting with "elastic:" are for tests (tests/tensorflow_elastic/).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ronde.tensorflow as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402

ORDER_SEED = 7  # each epoch's permutation of the samples is seeded by ORDER_SEED + epoch
WEIGHT_SEED = 1234


def make_model():
    model = tf.keras.Sequential([tf.keras.Input((64,)),
                                 tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    # The same start on every rank from a seed of our own (the first sync makes it so
    # anyway); tests replay the training from it.
    rng = np.random.RandomState(WEIGHT_SEED)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) * np.sqrt(6.0 / sum(w.shape))
                       if w.ndim == 2 else np.zeros(w.shape, np.float32)
                       for w in model.get_weights()])
    return model


def epoch_order(epoch, count):
    return np.random.RandomState(ORDER_SEED + epoch).permutation(count)


def log(*parts):
    print("elastic:", *parts, "t=%.3f" % time.time(), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by size")
    parser.add_argument("--commit-every", type=int, default=5, help="steps between commits")
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds of pretend extra compute per step (tests)")
    parser.add_argument("--save", help="rank 0 writes the final weights here (.npz, tests)")
    args = parser.parse_args()

    hvd.init()
    # Ranks sharing a host must not oversubscribe its cores.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    train_x, train_y, test_x, test_y = load_digits()

    model = make_model()
    optimizer = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # Horovod's recipe: the learning rate follows the world's size after every reset.
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, offset=0, step=0)
    state.register_reset_callbacks([lambda: setattr(optimizer, "learning_rate",
                                                    args.lr * hvd.size())])

    def commit():
        if hvd.rank() == 0:
            log("commit step=%d epoch=%d size=%d" % (state.step, state.epoch, hvd.size()))
        state.commit()

    @hvd.elastic.run
    def train(state):
        log("synced pid=%d worker=%s rank=%d size=%d step=%d epoch=%d offset=%d"
            % (os.getpid(), os.environ.get("RONDE_ELASTIC_WORKER_ID", "-"), hvd.rank(),
               hvd.size(), state.step, state.epoch, state.offset))
        while state.epoch < args.epochs:
            order = epoch_order(state.epoch, len(train_x))
            global_batch = args.batch_size * hvd.size()
            # The last samples that do not fill a global batch wait for the next epoch.
            while state.offset + global_batch <= len(order):
                begin = state.offset + hvd.rank() * args.batch_size
                rows = order[begin:begin + args.batch_size]
                train_step(tf.constant(train_x[rows]), tf.constant(train_y[rows]))
                if args.step_delay:
                    time.sleep(args.step_delay)
                state.offset += global_batch
                state.step += 1
                if state.step % args.commit_every == 0:
                    commit()
            state.epoch += 1
            state.offset = 0
            commit()

    train(state)

    logits = model(test_x, training=False).numpy()
    accuracy = float(np.mean(np.argmax(logits, 1) == test_y))
    digest = float(sum(np.sum(w, dtype=np.float64) for w in model.get_weights()))
    digests = hvd.allgather_object(digest)
    same = all(d == digests[0] for d in digests)
    if args.save and hvd.rank() == 0:
        np.savez(args.save, *model.get_weights())
    log("done pid=%d rank=%d size=%d step=%d accuracy=%.4f identical=%s digest=%.12f"
        % (os.getpid(), hvd.rank(), hvd.size(), state.step, accuracy, same, digest))
    hvd.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
