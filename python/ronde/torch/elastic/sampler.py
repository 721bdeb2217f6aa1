"""Horovod's ``hvd.elastic.ElasticSampler``: shards a dataset over the current world and
remembers which samples this epoch has processed, so that after a reset the new world
shares out only the rest."""

import math

import torch

from ronde import _core


class ElasticSampler(torch.utils.data.Sampler):
    """Sampler over ``dataset`` for the world as it is now (re-read at every reset and
    set_epoch). Call ``record_batch(batch_idx, batch_size)`` after each batch and
    ``set_epoch(epoch)`` at the start of each epoch, as with Horovod.

    One difference from Horovod: record_batch records the batch of every rank, not only this
    rank's (all ranks draw from the same permutation, so each can tell what the others took).
    A rank that dies therefore takes no record with it: after a reset no committed sample is
    processed twice, and none is skipped."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self._ordered = []  # this epoch's remaining samples in drawing order, padded
        self.indices = []   # this rank's share of them
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing is processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks batch `batch_idx` (counted from the last reset) as processed on every rank."""
        self.record_indices(self._batch_of_every_rank(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's samples in batch `batch_idx`."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_indices=set(self.processed_indices))

    def reset(self):
        """Re-reads rank and size and shares out the samples not processed yet."""
        self.num_replicas = _core.size() if _core.is_initialized() else 1
        self.rank = _core.rank() if _core.is_initialized() else 0
        self.remaining_indices = [i for i in range(len(self.dataset))
                                  if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self._draw()

    def _draw(self):
        ordered = list(self.remaining_indices)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            ordered = [ordered[i] for i in torch.randperm(len(ordered), generator=generator)]
        if ordered:
            ordered += ordered[:self.total_size - len(ordered)]  # every rank gets as many
        self._ordered = ordered
        self.indices = ordered[self.rank:self.total_size:self.num_replicas]

    def _batch_of_every_rank(self, batch_idx, batch_size):
        taken = set()
        start = batch_idx * batch_size
        for r in range(self.num_replicas):
            share = self._ordered[r:self.total_size:self.num_replicas]
            taken.update(share[start:start + batch_size])
        return taken

    def __iter__(self):
        self._draw()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
