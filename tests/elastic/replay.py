"""The independent expectation for the fault tests: the elastic digits job replayed in one
process, world by world, from the schedule the job reported (which generation synced at
which step with how many ranks).

Nothing of ronde runs here: the replay takes the example's definition of training (the MLP,
SGD with momentum, the learning rate scaled by size / 4, cross-entropy averaged over the
global batch, every rank drawing its share of one seeded permutation of the samples not yet
processed in the epoch) and applies it to the worlds that held the committed state. A world
that broke loses only its steps after its last commit, so world k contributes exactly the
steps from its own resume step to the next world's. If the real job lost a committed step,
processed a sample twice, skipped one or synced the wrong state, its parameters differ from
the replay's by far more than rounding."""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from train_digits import Net, digits_path, load_digits  # noqa: E402

SAMPLER_SEED = 7  # the example's ElasticSampler(seed=7)
MODEL_SEED = 1234


def world_schedule(worlds):
    """[(size, step)] in generation order from {gen: (size, step)}; checks no world resumed
    behind its predecessor (a committed step lost)."""
    schedule = [worlds[g] for g in sorted(worlds)]
    for (_, before), (_, after) in zip(schedule, schedule[1:]):
        assert after >= before, "a world resumed at step %d behind its predecessor's %d: %s" % (
            after, before, schedule)
    return schedule


def synced_schedule(synced):
    """[(size, step)] of the worlds from the example's "elastic: synced" lines (field dicts):
    ordered by the worker's own clock, consecutive lines of one (size, step) are one world.
    Merging two worlds that share both is harmless: the first took no step."""
    schedule = []
    for f in sorted(synced, key=lambda f: float(f["t"])):
        world = (int(f["size"]), int(f["step"]))
        if not schedule or schedule[-1] != world:
            schedule.append(world)
    return world_schedule(dict(enumerate(schedule)))


def parameter_digest(state_dict):
    """The example's "done ... digest=": the sum of every parameter, in double."""
    return sum(value.double().sum().item() for value in state_dict.values())


def _shares(remaining, epoch, size):
    """Each rank's samples, in order: one permutation of `remaining` seeded by the epoch,
    padded with its own head to a multiple of `size`, dealt out round-robin."""
    generator = torch.Generator()
    generator.manual_seed(SAMPLER_SEED + epoch)
    ordered = [remaining[i] for i in torch.randperm(len(remaining), generator=generator)]
    per_rank = int(math.ceil(len(ordered) / size))
    if ordered:
        ordered += ordered[:per_rank * size - len(ordered)]
    return [ordered[r::size][:per_rank] for r in range(size)]


def _in_order(order):
    """Sums the ranks' gradients one addition at a time, in the rank order `order(size)`."""
    def combine(grads):
        picked = [grads[r] for r in order(len(grads))]
        total = picked[0].clone()
        for g in picked[1:]:
            total = total + g
        return total
    return combine


def _rotated(k):
    return _in_order(lambda n: [(r + k) % n for r in range(n)])


def _pairwise(grads):
    while len(grads) > 1:
        grads = [grads[i] + grads[i + 1] if i + 1 < len(grads) else grads[i]
                 for i in range(0, len(grads), 2)]
    return grads[0]


# Ways of summing the ranks' gradients that a job's allreduce may take (its order depends
# on the algorithm and the chunk). Rounding alone rarely moves the result by more than 1e-4,
# but near a ReLU that one sample barely crosses it decides which side: the 12-epoch job
# joined by a fresh worker at step 60 lands at 105.9596 when the 4 gradients are summed in
# reverse order and at 105.9218 in rank order, every time. So a job is held to the nearest
# of these replays, each still exact to rounding; a lost commit or a skipped sample moves
# the result by 2-8 in all of them.
SUM_ORDERS = {
    "rank order": _rotated(0),
    "reverse": _in_order(lambda n: list(range(n))[::-1]),
    "rotated by 1": _rotated(1),
    "rotated by 2": _rotated(2),
    "pairwise": _pairwise,
}


class Replay:
    def __init__(self, epochs, batch_size=32, lr=0.1, combine=None):
        """combine: None averages the loss over the global batch in one backward pass;
        otherwise each rank's mean-loss gradient is formed apart and combine(list) sums
        them (one of SUM_ORDERS), as the allreduce does, before dividing by the size."""
        self.combine = combine
        self.epochs = epochs
        self.batch_size = batch_size
        self.base_lr = lr
        torch.set_num_threads(1)  # tiny batches: threads only contend on a loaded machine
        torch.manual_seed(MODEL_SEED)
        self.x, self.y, _, _ = load_digits(digits_path())
        self.model = Net()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.epoch = 0
        self.batch = 0  # batches of this epoch since the current world started it
        self.step = 0
        self.processed = set()
        self.seen_per_epoch = {}  # epoch -> every sample a step took

    def run_world(self, size, until_step):
        """Trains as a world of `size` ranks from the current state up to `until_step`
        (or the end of training)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.base_lr * size / 4
        while self.epoch < self.epochs:
            if self.batch == 0:
                self.processed = set()
            remaining = [i for i in range(len(self.x)) if i not in self.processed]
            shares = _shares(remaining, self.epoch, size)
            batches = int(math.ceil(len(shares[0]) / self.batch_size)) if remaining else 0
            for i in range(batches):
                if self.step == until_step:
                    return
                batches_of_ranks = [share[i * self.batch_size:(i + 1) * self.batch_size]
                                    for share in shares]
                rows = [row for batch in batches_of_ranks for row in batch]
                self.optimizer.zero_grad()
                if self.combine is None:
                    # Every rank's batch has the same length, so the mean over all rows is the
                    # average of the ranks' mean losses that the allreduce forms.
                    index = torch.tensor(rows)
                    F.cross_entropy(self.model(self.x[index]), self.y[index]).backward()
                else:
                    self._combined_gradient(batches_of_ranks)
                self.optimizer.step()
                self.processed.update(rows)
                self.seen_per_epoch.setdefault(self.epoch, set()).update(rows)
                self.batch += 1
                self.step += 1
            self.epoch += 1
            self.batch = 0
        assert until_step is None or self.step == until_step, (
            "training ended at step %d, before the world's end at %d" % (self.step, until_step))

    def _combined_gradient(self, batches_of_ranks):
        per_rank = []
        for batch in batches_of_ranks:
            self.optimizer.zero_grad()
            index = torch.tensor(batch)
            F.cross_entropy(self.model(self.x[index]), self.y[index]).backward()
            per_rank.append([p.grad.clone() for p in self.model.parameters()])
        for k, p in enumerate(self.model.parameters()):
            p.grad = self.combine([grads[k] for grads in per_rank]) / len(per_rank)

    def run(self, schedule):
        """schedule: [(size, resume step)] of every world that synced, in order."""
        for k, (size, start) in enumerate(schedule):
            assert self.step == start, "world %d resumed at %d, the replay is at %d" % (
                k, start, self.step)
            until = schedule[k + 1][1] if k + 1 < len(schedule) else None
            self.run_world(size, until)
        for epoch in range(self.epochs):
            assert self.seen_per_epoch.get(epoch) == set(range(len(self.x))), (
                "epoch %d did not see every sample" % epoch)
        return self.model.state_dict()


def max_difference(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def replays(epochs, schedule):
    """(how the gradients were summed, final state_dict) for the one-batch replay, then for
    each of SUM_ORDERS; lazily, so a caller that matches the first computes no other."""
    yield "one batch", Replay(epochs).run(schedule)
    for name, combine in SUM_ORDERS.items():
        yield name, Replay(epochs, combine=combine).run(schedule)
