"""The independent expectation for the TensorFlow and Keras elastic jobs: their training
replayed in one process with plain TensorFlow (no ronde), world by world, from the schedule
the job reported.

Both examples train the same MLP from the same seeded weights with SGD (momentum 0.9) at a
learning rate of base x world size, each rank's gradient the mean loss over its batch, the
ranks' gradients averaged. What differs is how a world takes its data:

- tensorflow2_elastic_digits.py (the custom loop) walks each epoch's seeded permutation of
  the samples, a global batch of size x B per step, rank r taking the r-th B of it; a world
  resumes at the committed offset, and a tail that does not fill a global batch is skipped.
- keras_elastic_digits.py (model.fit) gives rank r the samples r, r + size, ... (as many
  whole batches as every rank has), in order; as under Horovod, model.fit starts its epoch
  from the first batch again after every reset, keeping the committed weights and epoch.

A world that broke loses only its steps after its last commit, so world k contributes the
steps from its resume step to the next world's. A lost commit, a sample skipped or taken
twice, a wrong learning rate or state synced from the wrong rank moves the parameters far
beyond rounding."""
import os
import sys

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from digits_data import load_digits  # noqa: E402
from tensorflow2_elastic_digits import epoch_order, make_model  # noqa: E402


def _rank_order(grads):
    total = grads[0]
    for g in grads[1:]:
        total = total + g
    return total


def _reverse_order(grads):
    return _rank_order(grads[::-1])


def _last_two_first(grads):
    if len(grads) < 3:
        return _rank_order(grads)
    return _rank_order([grads[0], grads[1] + grads[2]] + list(grads[3:]))


# How the allreduce may have summed the ranks' gradients (its order depends on the algorithm
# and the chunk), and how it scaled the sum (the runtime multiplies by 1/size in double).
# Rounding alone moves the result by ~1e-6; near a ReLU that a sample barely crosses the
# order decides the side. A job is held to the nearest of these, each exact to rounding.
SUM_ORDERS = {"rank order": _rank_order, "reverse": _reverse_order,
              "last two first": _last_two_first}


class Replay:
    def __init__(self, lr, batch_size=32, sum_order=_rank_order):
        tf.config.threading.set_intra_op_parallelism_threads(1)
        self.x, self.y, _, _ = load_digits()
        self.lr = lr
        self.batch_size = batch_size
        self.sum_order = sum_order
        self.model = make_model()
        self.optimizer = tf.keras.optimizers.SGD(lr, momentum=0.9)
        self.loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.step = 0
        self.epoch = 0
        self.offset = 0
        self._step_fn = tf.function(self._grads)

    def _grads(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.model(x, training=True))
        return tape.gradient(loss, self.model.trainable_variables)

    def train_step(self, rows_of_ranks):
        per_rank = [self._step_fn(tf.constant(self.x[rows]), tf.constant(self.y[rows]))
                    for rows in rows_of_ranks]
        scale = 1.0 / len(per_rank)
        averaged = []
        for k in range(len(per_rank[0])):
            total = self.sum_order([grads[k] for grads in per_rank])
            averaged.append(tf.cast(tf.cast(total, tf.float64) * scale, tf.float32))
        self.optimizer.apply_gradients(zip(averaged, self.model.trainable_variables))
        self.step += 1

    def parameters(self):
        return [w.copy() for w in self.model.get_weights()]


def digest(weights):
    """The examples' "done ... digest=": the sum of every weight, in double."""
    return float(sum(np.sum(w, dtype=np.float64) for w in weights))


def replay_custom_loop(schedule, epochs, lr, batch_size=32, sum_order=_rank_order):
    """schedule: [(size, resume step, epoch, offset)] of every world in order (the position
    its sync gave it). Returns the final weights."""
    replay = Replay(lr, batch_size, sum_order)
    count = len(replay.x)
    previous_size = None
    for k, (size, start, epoch, offset) in enumerate(schedule):
        assert replay.step == start, "world %d resumed at step %d, the replay is at %d" % (
            k, start, replay.step)
        # The commit at an epoch's last step holds the epoch's tail position; the one right
        # after it (the epoch's end) the next epoch at 0. A world may resume from either.
        tail_done = previous_size is not None and (
            replay.offset + batch_size * previous_size > count)
        assert (epoch, offset) == (replay.epoch, replay.offset) or (
            tail_done and (epoch, offset) == (replay.epoch + 1, 0)), (
            "world %d resumed at epoch %d offset %d, the replay is at epoch %d offset %d"
            % (k, epoch, offset, replay.epoch, replay.offset))
        replay.epoch, replay.offset = epoch, offset
        until = schedule[k + 1][1] if k + 1 < len(schedule) else None
        replay.optimizer.learning_rate = lr * size
        global_batch = batch_size * size
        while replay.epoch < epochs and replay.step != until:
            order = epoch_order(replay.epoch, count)
            while replay.offset + global_batch <= count and replay.step != until:
                replay.train_step([order[replay.offset + r * batch_size:][:batch_size]
                                   for r in range(size)])
                replay.offset += global_batch
            if replay.step == until:
                break
            replay.epoch += 1
            replay.offset = 0
        assert until is None or replay.step == until, (
            "training ended at step %d before world %d's end at %d" % (replay.step, k, until))
        previous_size = size
    return replay.parameters()


def keras_steps_per_epoch(count, size, batch_size):
    return count // (size * batch_size)


def replay_model_fit(schedule, epochs, lr, batch_size=32, sum_order=_rank_order):
    """schedule: [(size, resume step, resume epoch)] of every world in order. Returns the
    final weights."""
    replay = Replay(lr, batch_size, sum_order)
    for k, (size, start, epoch) in enumerate(schedule):
        assert replay.step == start, "world %d resumed at step %d, the replay is at %d" % (
            k, start, replay.step)
        # A world starts its epoch from the first batch (model.fit restarts it), at the epoch
        # the commit holds: the one in progress, or the next after an epoch's end.
        assert epoch in (replay.epoch, replay.epoch + 1), (k, epoch, replay.epoch)
        replay.epoch = epoch
        until = schedule[k + 1][1] if k + 1 < len(schedule) else None
        replay.optimizer.learning_rate = lr * size
        steps = keras_steps_per_epoch(len(replay.x), size, batch_size)
        shards = [np.arange(r, len(replay.x), size)[:steps * batch_size] for r in range(size)]
        while replay.epoch < epochs and replay.step != until:
            for j in range(steps):
                if replay.step == until:
                    break
                replay.train_step([shard[j * batch_size:(j + 1) * batch_size]
                                   for shard in shards])
            else:
                replay.epoch += 1
        assert until is None or replay.step == until, (
            "training ended at step %d before world %d's end at %d" % (replay.step, k, until))
    return replay.parameters()


def replays(kind, schedule, epochs, lr, batch_size=32):
    """(sum order, final weights) for each of SUM_ORDERS, lazily: a caller that matches the
    first computes no other."""
    replay = replay_custom_loop if kind == "custom loop" else replay_model_fit
    for name, order in SUM_ORDERS.items():
        yield name, replay(schedule, epochs, lr, batch_size, order)
