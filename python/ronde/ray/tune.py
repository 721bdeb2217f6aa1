"""ronde.ray.tune: a Ray Tune trainable whose every trial is a ronde job (Horovod's
DistributedTrainableCreator).

Tune reserves each trial's resources as one placement group: an empty head bundle for the
trial's own actor (it only waits and forwards) and one bundle per rank. The trial starts a
RayExecutor on that group (the ranks are its actors, so Tune's queueing, not the executor,
decides when a trial's slots are free), runs the function on every rank, and forwards what
rank 0 reports to Tune as it arrives, so schedulers (ASHA, PBT, stop criteria) see every
iteration. A rank that fails or dies fails the trial naming the rank and node.
"""

import os
import pickle
import queue as queue_module
import tempfile

from ronde.ray.runner import RayExecutor, RaySettings

_CHECKPOINT_FILE = "ronde_checkpoint.pkl"
_POLL_S = 0.2  # how often the trial looks at the ranks while no report arrives

# The trial a rank is running, set in the rank's actor process for the length of the call.
# report() is called from deep inside user code, which holds no handle; Tune's own report()
# finds its session the same way, and an actor runs one function at a time.
_session = None


class _TrialSession:
    def __init__(self, reports, rank, checkpoint):
        self.reports = reports
        self.rank = rank
        self.checkpoint = checkpoint


def report(metrics, checkpoint=None):
    """Reports one iteration's metrics to Tune (Horovod: ``tune.report`` inside the function).

    Call it on every rank (or on rank 0 only): rank 0's calls reach Tune, in order; the other
    ranks' return at once. ``checkpoint`` is any picklable object (a state_dict, say); Tune
    stores it with this result, and a restored trial's ranks get it from get_checkpoint().
    """
    if _session is None:
        raise RuntimeError("ronde.ray.tune.report: not inside a trial of a trainable made by "
                           "ronde.ray.tune.DistributedTrainableCreator")
    if _session.rank == 0:
        _session.reports.put((dict(metrics), checkpoint))


def get_checkpoint():
    """The checkpoint object rank 0 last reported before this trial was restored (Tune's
    fault tolerance, PBT's exploit), or None on a fresh trial. The same on every rank."""
    if _session is None:
        raise RuntimeError("ronde.ray.tune.get_checkpoint: not inside a trial of a trainable "
                           "made by ronde.ray.tune.DistributedTrainableCreator")
    return _session.checkpoint


def _run_rank(func, config, reports, checkpoint):
    """What each rank's actor runs: func(config) with report() wired to the trial."""
    global _session
    _session = _TrialSession(reports, int(os.environ["RONDE_RANK"]), checkpoint)
    try:
        return func(config)
    finally:
        _session = None


class _TrialExecutor(RayExecutor):
    """A RayExecutor on the placement group Tune reserved for the trial (lent, not owned)."""

    def __init__(self, group, settings, **options):
        super().__init__(settings, **options)
        self._lent_group = group

    def _reserve(self, count):
        import ray
        bundles = self._lent_group.bundle_specs
        if len(bundles) < count:
            raise RuntimeError("ronde.ray.tune: the trial's placement group has %d bundles for "
                               "%d ranks; pass the trainable to Tune as "
                               "DistributedTrainableCreator returns it" % (len(bundles), count))
        ray.get(self._lent_group.ready(), timeout=self.settings.timeout_s)
        self._owns_placement_group = False
        return self._lent_group


def _restored_checkpoint():
    from ray import tune
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, _CHECKPOINT_FILE)
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            return pickle.load(f)


def _forward(metrics, checkpoint):
    from ray import tune
    if checkpoint is None:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="ronde-tune-") as directory:
        with open(os.path.join(directory, _CHECKPOINT_FILE), "wb") as f:
            pickle.dump(checkpoint, f)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))


def _run_trial(func, config, options, settings):
    import ray
    from ray.util.queue import Empty, Queue
    group = ray.util.get_current_placement_group()
    if group is None:
        raise RuntimeError("ronde.ray.tune: the trial runs outside a placement group; give "
                           "Tune the trainable DistributedTrainableCreator returned")
    restored = _restored_checkpoint()
    reports = Queue(actor_options={"num_cpus": 0})
    executor = _TrialExecutor(group, settings, **options)
    finished = False
    try:
        executor.start()
        refs = executor.run_remote(_run_rank, args=(func, config, reports, restored))
        pending = list(refs)
        while True:
            try:
                _forward(*reports.get(timeout=_POLL_S))
                continue
            except Empty:
                pass
            if not pending:
                break  # every rank returned and every report was forwarded
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in done:
                executor._check_finished(refs, ref)
        ray.get(refs)
        finished = True
    finally:
        # Stopped by Tune (a scheduler, a stop criterion) or failed: the ranks may sit in a
        # collective, so they are killed rather than asked to leave their runtimes.
        executor.shutdown(graceful=finished)
        ray.kill(reports.actor)
    # Nothing returned: what the ranks return stays with them; Tune sees what they report.


def DistributedTrainableCreator(func, num_workers=None, cpus_per_worker=1, use_gpu=False,
                                gpus_per_worker=None, placement_group_strategy="PACK",
                                num_hosts=None, num_workers_per_host=None, timeout_s=60,
                                env=None, num_slots=None, num_cpus_per_slot=None):
    """A Tune trainable that runs ``func(config)`` as a ronde job of num_workers ranks per
    trial (Horovod's ``DistributedTrainableCreator``).

    func calls ``hvd.init()`` itself and reports with ``ronde.ray.tune.report(metrics)``
    (Horovod's workers call ``tune.report``). The placement arguments are RayExecutor's;
    Horovod's names ``num_slots`` (workers per host) and ``num_cpus_per_slot`` are accepted.
    The result is ``tune.with_resources(trainable, PlacementGroupFactory(...))``: pass it to
    ``tune.Tuner`` as it is. Differences from Horovod: func takes only ``config`` (checkpoints
    go through report(checkpoint=...) and get_checkpoint()), and the trial's own actor holds
    no CPU.
    """
    from ray import tune
    if num_slots is not None:
        if num_workers_per_host is not None:
            raise ValueError("DistributedTrainableCreator: give num_slots or "
                             "num_workers_per_host, not both")
        num_workers_per_host = num_slots
        if num_hosts is None:
            num_hosts = 1
    if num_cpus_per_slot is not None:
        cpus_per_worker = num_cpus_per_slot
    if not callable(func):
        raise TypeError("DistributedTrainableCreator: func must be callable, not %r" % (func,))
    options = {"num_workers": num_workers, "cpus_per_worker": cpus_per_worker,
               "use_gpu": use_gpu, "gpus_per_worker": gpus_per_worker,
               "placement_group_strategy": placement_group_strategy, "num_hosts": num_hosts,
               "num_workers_per_host": num_workers_per_host}
    shape = RayExecutor(None, **options)  # validates the arguments; gives bundles and strategy
    settings = RaySettings(timeout_s=timeout_s, env=env)

    def trainable(config):
        return _run_trial(func, config, options, settings)

    trainable.__name__ = "ronde_%s" % getattr(func, "__name__", "trainable")
    resources = tune.PlacementGroupFactory(
        [{}] + [shape._bundle() for _ in range(shape.num_workers)],
        strategy=shape.placement_group_strategy)
    return tune.with_resources(trainable, resources)
