#!/usr/bin/env python3
"""Trains a 64-128-64-10 MLP on the digits in TF1 graph mode, as Horovod's original tutorial
(tensorflow_mnist.py) does: a graph built with tf.compat.v1, a TF1 optimizer wrapped in
hvd.DistributedOptimizer, hvd.BroadcastGlobalVariablesHook(0) and StopAtStepHook in a
tf.train.MonitoredTrainingSession, checkpoints written by rank 0 only, the step count divided
by the number of ranks, and the learning rate scaled by it.

One process:     python examples/tensorflow1_digits.py
Two processes:   ronde run -np 2 python examples/tensorflow1_digits.py
Exits non-zero below 95% test accuracy, or when the ranks' parameters differ.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ronde.tensorflow as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402

v1 = tf.compat.v1


def dense(inputs, units, name, activation=None):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [inputs.shape[1], units],
                            initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("b", [units], initializer=v1.zeros_initializer())
        out = tf.matmul(inputs, w) + b
    return activation(out) if activation else out


class Evaluation(v1.train.SessionRunHook):
    """Runs `fetches` once, when the training session ends (on every rank alike)."""

    def __init__(self, fetches, feed):
        self.fetches, self.feed = fetches, feed
        self.right = self.digests = None

    def end(self, session):
        self.right, self.digests = session.run(self.fetches, self.feed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500, help="for one rank; divided by size")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="rank 0 writes checkpoints here (default: a temporary folder)")
    args = parser.parse_args()

    v1.disable_eager_execution()
    hvd.init()
    verbose = hvd.rank() == 0
    train_x, train_y, test_x, test_y = load_digits()
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]

    v1.set_random_seed(42 + hvd.rank())  # different on purpose: the hook's broadcast fixes it
    images = v1.placeholder(tf.float32, [None, 64], name="images")
    labels = v1.placeholder(tf.int64, [None], name="labels")
    hidden = dense(dense(images, 128, "dense1", tf.nn.relu), 64, "dense2", tf.nn.relu)
    logits = dense(hidden, 10, "logits")
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.int64))
    total_correct = hvd.allreduce(correct, op=hvd.Sum, name="correct")  # over the ranks' shares

    opt = v1.train.MomentumOptimizer(args.lr * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt)
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    # What every rank sees after training, to check that their parameters are one model.
    digest = hvd.allgather(tf.reshape(tf.add_n(
        [tf.reduce_sum(tf.cast(v, tf.float64)) for v in v1.trainable_variables()]), [1]))

    # The session refuses to run once StopAtStepHook has asked it to stop; the test shares are
    # counted (and summed over the ranks) as it closes.
    evaluation = Evaluation([total_correct, digest],
                            {images: test_x[hvd.rank()::hvd.size()],
                             labels: test_y[hvd.rank()::hvd.size()]})
    hooks = [hvd.BroadcastGlobalVariablesHook(0),
             v1.train.StopAtStepHook(last_step=args.steps // hvd.size()), evaluation]
    checkpoint_dir = None
    if hvd.rank() == 0:  # only rank 0 writes checkpoints, so that ranks do not overwrite them
        checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="tf1_digits_")
    if verbose:
        print("training on %d rank(s): %d train / %d test examples, %d steps"
              % (hvd.size(), len(train_x), len(test_x), args.steps // hvd.size()), flush=True)

    rng = np.random.RandomState(42)
    order, position = rng.permutation(len(shard_y)), 0
    with v1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks,
                                           save_summaries_steps=None,
                                           save_summaries_secs=None) as session:
        while not session.should_stop():
            if position + args.batch_size > len(order):
                order, position = rng.permutation(len(shard_y)), 0
            batch = order[position:position + args.batch_size]
            position += args.batch_size
            step, value = session.run([global_step, loss, train_op],
                                      {images: shard_x[batch], labels: shard_y[batch]})[:2]
            if verbose and step % 100 == 0:
                print("step %4d loss %.4f" % (step, value), flush=True)
    right, digests = evaluation.right, evaluation.digests
    test_accuracy = float(right) / len(test_y)
    identical = bool(np.allclose(digests, digests[0]))
    if verbose:
        print("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s"
              % (100 * test_accuracy, hvd.size(), identical), flush=True)
    hvd.shutdown()
    return 0 if test_accuracy >= 0.95 and identical else 1


if __name__ == "__main__":
    sys.exit(main())
