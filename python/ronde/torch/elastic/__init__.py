"""Elastic training for PyTorch with Horovod's API: ``hvd.elastic`` (``ronde.torch.elastic``).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=state.batch):  # resumes here
                ...
                if state.batch % commit_every == 0:
                    state.commit()
            state.batch = 0

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, batch=0)
    train(state)

Start it with ``ronde run -np N --min-np A --max-np B --host-discovery-script S ...``.
See docs/elastic.md for what survives a failure and what is lost.
"""

from ronde.common.elastic import HorovodInternalError, HostsUpdatedInterrupt, run_fn
from ronde.torch.elastic.sampler import ElasticSampler
from ronde.torch.elastic.state import ObjectState, State, TorchState, collectives


def run(func):
    """Horovod's ``hvd.elastic.run``: decorates ``func(state, ...)``. Before each attempt the
    state is synced from a rank that holds it; a lost peer restores the last commit and a
    host update re-forms the world, then ``func`` runs again from the restored state."""
    return run_fn(func, collectives())


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "State", "TorchState", "run"]
