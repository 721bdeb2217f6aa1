#!/usr/bin/env python3
"""Elastic training of the digits MLP with Keras 3 model.fit: workers may die or join while
training goes on (Horovod's Keras elastic recipe on ronde.keras, tensorflow backend).

    KERAS_BACKEND=tensorflow ronde run -np 2 --min-np 1 --max-np 2 \\
        --host-discovery-script ./discover_hosts.sh python examples/keras_elastic_digits.py

The model and optimizer live in a hvd.elastic.KerasState with the epoch, the batch and a
global step count; UpdateEpochStateCallback and UpdateBatchStateCallback keep the position,
CommitStateCallback commits every few batches and at each epoch's end. A reset callback
scales the learning rate with the world's size. Kill a worker and the others roll back to
their last commit, re-form without it and call model.fit again for the epochs left; as under
Horovod, that model.fit begins its epoch at the first batch again (the committed weights and
epoch are kept). Rank r trains on samples r, r + size, ... in order (no shuffling), as many
whole batches as every rank has.

Lines starting with "elastic:" are for tests (tests/tensorflow_elastic/).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import ronde.keras as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_data import load_digits  # noqa: E402
from tensorflow2_elastic_digits import make_model  # noqa: E402  (same MLP, same start)


def log(*parts):
    print("elastic:", *parts, "t=%.3f" % time.time(), flush=True)


class CountSteps(keras.callbacks.Callback):
    """state.step: the batches trained in the whole job (each world's replay needs it). Put
    before CommitStateCallback, so a commit holds the step it ends."""

    def __init__(self, state, delay):
        super().__init__()
        self.state = state
        self.delay = delay

    def on_train_batch_end(self, batch, logs=None):
        if self.delay:
            time.sleep(self.delay)
        self.state.step += 1


class LoggedCommit(hvd.elastic.CommitStateCallback):
    def commit(self):
        if hvd.rank() == 0:
            log("commit step=%d epoch=%d batch=%d size=%d"
                % (self.state.step, self.state.epoch, self.state.batch, hvd.size()))
        super().commit()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by size")
    parser.add_argument("--batches-per-commit", type=int, default=5)
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds of pretend extra compute per step (tests)")
    parser.add_argument("--save", help="rank 0 writes the final weights here (.npz, tests)")
    args = parser.parse_args()

    hvd.init()
    import tensorflow as tf
    # Ranks sharing a host must not oversubscribe its cores.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    train_x, train_y, test_x, test_y = load_digits()

    model = make_model()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(),
                                                              momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    state = hvd.elastic.KerasState(model, batch=0, epoch=0, step=0)
    # Horovod's recipe: the learning rate follows the world's size after every reset.
    state.register_reset_callbacks([lambda: setattr(model.optimizer, "learning_rate",
                                                    args.lr * hvd.size())])
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 CountSteps(state, args.step_delay),
                 LoggedCommit(state, batches_per_commit=args.batches_per_commit)]

    @hvd.elastic.run
    def train(state):
        log("synced pid=%d worker=%s rank=%d size=%d step=%d epoch=%d batch=%d"
            % (os.getpid(), os.environ.get("RONDE_ELASTIC_WORKER_ID", "-"), hvd.rank(),
               hvd.size(), state.step, state.epoch, state.batch))
        steps = len(train_x) // (hvd.size() * args.batch_size)
        rows = np.arange(hvd.rank(), len(train_x), hvd.size())[:steps * args.batch_size]
        model.fit(train_x[rows], train_y[rows], batch_size=args.batch_size, shuffle=False,
                  epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=0)

    train(state)

    logits = keras.ops.convert_to_numpy(model.predict(test_x, verbose=0))
    accuracy = float(np.mean(np.argmax(logits, 1) == test_y))
    digest = float(sum(np.sum(w, dtype=np.float64) for w in model.get_weights()))
    digests = hvd.allgather_object(digest)
    same = all(d == digests[0] for d in digests)
    if args.save and hvd.rank() == 0:
        np.savez(args.save, *model.get_weights())
    log("done pid=%d rank=%d size=%d step=%d epoch=%d accuracy=%.4f identical=%s digest=%.12f"
        % (os.getpid(), hvd.rank(), hvd.size(), state.step, state.epoch, accuracy, same, digest))
    hvd.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
