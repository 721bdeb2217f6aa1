"""ronde.ray.RayExecutor: a ronde job whose ranks are Ray actors in a placement group.

The driver reserves one bundle per rank (a placement group, so the job gets all its slots or
none), starts one actor per bundle, asks each actor where Ray put it, then numbers the ranks
host by host (so the ranks of one node are consecutive local ranks) and hands each actor the
same variables `ronde run` would. The driver serves the rendezvous store.

The steps are separate methods (_reserve, _start_actors, _assign_ranks) so that an elastic
executor can redo them when the cluster changes.
"""

import os

from ronde import _job_env
from ronde.ray.callbacks import CallbackPump


class RaySettings:
    """Settings of a RayExecutor (Horovod's RayExecutor.create_settings).

    timeout_s: how long start() waits for the placement group (all slots) and for the
    actors; placement_group_timeout_s defaults to it. env: extra variables for every rank.
    """

    def __init__(self, timeout_s=60, placement_group_timeout_s=None, env=None, nics=None,
                 verbose=1):
        self.timeout_s = float(timeout_s)
        self.placement_group_timeout_s = float(
            placement_group_timeout_s if placement_group_timeout_s is not None else timeout_s)
        self.env = dict(env or {})
        self.nics = set(nics) if nics else None
        self.verbose = verbose


class _Worker:
    """The body of each rank's actor (wrapped by ray.remote in RayExecutor._start_actors)."""

    executable = None  # start(executable_cls=...) makes one per actor; execute() passes it

    def where(self):
        import socket
        import ray
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "hostname": socket.gethostname(), "pid": os.getpid()}

    def set_env(self, env):
        os.environ.update(env)

    def execute(self, fn, args, kwargs):
        return fn(*args, **kwargs)

    def start_executable(self, cls, args, kwargs):
        self.executable = cls(*args, **kwargs)

    def execute_on_executable(self, fn):
        return fn(self.executable)

    def set_queue(self, queue):
        from ronde.ray import ray_logger
        ray_logger.configure(queue)

    def shutdown_runtime(self):
        try:
            from ronde import _core
            _core.shutdown()
        except Exception:  # noqa: BLE001 - the actor is being discarded anyway
            pass


def _host_key(where, node_ips_are_unique):
    # A Ray node is a host to ronde. On a real cluster that is the node's IP; when several
    # Ray nodes share one machine (ray.cluster_utils.Cluster), the node id tells them apart.
    if node_ips_are_unique:
        return where["node_ip"]
    return "%s/ray-%s" % (where["node_ip"], where["node_id"][:8])


class RayExecutor:
    """Runs functions on num_workers ranks placed by Ray (Horovod's horovod.ray.RayExecutor).

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    results = executor.run(train, args=(...))   # per-rank return values, in rank order
    executor.shutdown()
    """

    @staticmethod
    def create_settings(timeout_s=60, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=None, nics=None, env=None, verbose=1):
        """Horovod's parameters, and ronde's env and verbose. Nothing is reached over ssh on
        Ray; as in Horovod, ssh_str (a private key) is written to ssh_identity_file (mode 0600)
        when that file does not exist, for the user's own tools."""
        if ssh_str:
            if not ssh_identity_file:
                raise ValueError("RayExecutor.create_settings: ssh_str needs ssh_identity_file")
            if not os.path.exists(ssh_identity_file):
                fd = os.open(ssh_identity_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(ssh_str)
        return RaySettings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                           env=env, nics=nics, verbose=verbose)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None,
                 use_current_placement_group=True, min_workers=None, max_workers=None,
                 reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True, placement_group_strategy="PACK"):
        """Horovod's parameters, in Horovod's order (placement_group_strategy is ronde's).

        min_workers (with max_workers, reset_limit, elastic_timeout) makes the executor
        elastic, as in Horovod: an ElasticRayExecutor runs the job. use_current_placement_group:
        inside a placement group (a Tune trial's, say), the ranks take its bundles instead of
        reserving new ones."""
        self._elastic = None
        if max_workers and (not min_workers or min_workers <= 0):
            raise ValueError("RayExecutor: max_workers needs a positive min_workers (elastic "
                             "jobs need a lower bound)")
        if min_workers is not None:
            if num_workers is not None:
                raise ValueError("RayExecutor: min_workers (elastic) and num_workers (static) "
                                 "cannot both be given")
            self._elastic = self._elastic_executor(
                settings, min_workers, max_workers, reset_limit, cooldown_range, elastic_timeout,
                override_discovery, cpus_per_worker, use_gpu, gpus_per_worker)
            self.settings = self._elastic.settings
            return
        if num_hosts is not None:
            if num_workers_per_host is None or num_workers_per_host < 1:
                raise ValueError("RayExecutor: num_workers_per_host must be a positive integer "
                                 "with num_hosts, not %r" % (num_workers_per_host,))
            if num_workers is not None and num_workers != num_hosts * num_workers_per_host:
                raise ValueError("RayExecutor: num_workers=%d but num_hosts * "
                                 "num_workers_per_host = %d"
                                 % (num_workers, num_hosts * num_workers_per_host))
            num_workers = num_hosts * num_workers_per_host
            placement_group_strategy = "STRICT_SPREAD" if num_workers_per_host == 1 else \
                placement_group_strategy
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("RayExecutor: num_workers must be a positive integer, not %r"
                             % (num_workers,))
        if placement_group_strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError("RayExecutor: placement_group_strategy must be PACK, SPREAD, "
                             "STRICT_PACK or STRICT_SPREAD, not %r" % (placement_group_strategy,))
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError("RayExecutor: gpus_per_worker needs use_gpu=True")
        self.settings = settings or RaySettings()
        self.use_current_placement_group = use_current_placement_group
        self.num_workers = num_workers
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.placement_group_strategy = placement_group_strategy
        self._placement_group = None
        self._owns_placement_group = True  # False when the group is lent (a Tune trial's)
        self._workers = []       # actor handles in rank order
        self._placements = []    # per rank: rank, host, local_rank, ... and where (Ray's facts)
        self._server = None

    @staticmethod
    def _elastic_executor(settings, min_workers, max_workers, reset_limit, cooldown_range,
                          elastic_timeout, override_discovery, cpus_per_worker, use_gpu,
                          gpus_per_worker):
        from ronde.ray.elastic_executor import ElasticRayExecutor, ElasticRaySettings
        if cooldown_range is not None:
            raise NotImplementedError("RayExecutor: cooldown_range is not supported on Ray: a "
                                      "lost Ray node is dropped, and used again when Ray reports "
                                      "it alive")
        if not override_discovery:
            raise NotImplementedError("RayExecutor: override_discovery=False (a discovery of "
                                      "your own) is not supported: the workers come from Ray's "
                                      "alive nodes")
        if isinstance(settings, ElasticRaySettings):
            elastic = settings
            if reset_limit is not None:
                elastic.reset_limit = reset_limit
            elastic.elastic_timeout_s = float(elastic_timeout)
        else:
            base = settings or RaySettings()
            elastic = ElasticRaySettings(timeout_s=base.timeout_s, env=base.env, nics=base.nics,
                                         verbose=base.verbose, elastic_timeout_s=elastic_timeout,
                                         reset_limit=reset_limit)
        return ElasticRayExecutor(elastic, min_workers=min_workers, max_workers=max_workers,
                                  cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                                  gpus_per_worker=gpus_per_worker)

    # -- start-up, in steps an elastic executor can redo ---------------------------------

    def _bundle(self):
        bundle = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker
        return bundle

    def _reserve(self, count):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        current = ray.util.get_current_placement_group()
        if self.use_current_placement_group and current is not None:
            # Horovod's default: a job started from inside a placement group runs in it.
            if len(current.bundle_specs) < count:
                raise RuntimeError(
                    "RayExecutor: the current placement group has %d bundles for %d workers; "
                    "give it more, or pass use_current_placement_group=False"
                    % (len(current.bundle_specs), count))
            ray.get(current.ready(), timeout=self.settings.placement_group_timeout_s)
            self._owns_placement_group = False
            return current
        group = placement_group([self._bundle() for _ in range(count)],
                                strategy=self.placement_group_strategy)
        ready, _ = ray.wait([group.ready()], timeout=self.settings.placement_group_timeout_s)
        if not ready:
            remove_placement_group(group)
            total = ray.cluster_resources()
            raise TimeoutError(
                "RayExecutor: the Ray cluster could not place %d workers of %s (strategy %s) "
                "within %gs; it has %s in all. Lower num_workers or add nodes"
                % (count, self._bundle(), self.placement_group_strategy,
                   self.settings.placement_group_timeout_s,
                   {k: v for k, v in total.items() if k in ("CPU", "GPU")}))
        return group

    def _start_actors(self, group, count):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        actor_class = ray.remote(_Worker)
        actors = []
        for index in range(count):
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=index)
            actors.append(actor_class.options(
                num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                scheduling_strategy=strategy).remote())
        wheres = ray.get([actor.where.remote() for actor in actors],
                         timeout=self.settings.timeout_s)
        return actors, wheres

    def _assign_ranks(self, actors, wheres):
        """Rank order: node by node (first appearance), so a node's ranks are consecutive."""
        ips_by_node = {}
        for where in wheres:
            ips_by_node[where["node_id"]] = where["node_ip"]
        unique = len(set(ips_by_node.values())) == len(ips_by_node)
        keys = [_host_key(where, unique) for where in wheres]
        order = []
        for key in keys:
            if key not in order:
                order.append(key)
        indices = sorted(range(len(actors)), key=lambda i: (order.index(keys[i]), i))
        placements = _job_env.placements([keys[i] for i in indices])
        for placement, i in zip(placements, indices):
            placement["where"] = wheres[i]
        return [actors[i] for i in indices], placements

    def _serve_store(self):
        import ray
        from ronde import _core
        secret = _job_env.make_secret()
        server = _core.TcpStoreServer("0.0.0.0", 0, secret)
        return server, "%s:%d" % (ray.util.get_node_ip_address(), server.port), secret

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Reserves the slots, starts the actors and hands them their ranks; then, with
        executable_cls, makes executable_cls(*executable_args, **executable_kwargs) on every
        actor (execute() hands it to its function), as Horovod does."""
        import ray
        if self._elastic is not None:
            if executable_cls is not None:
                raise NotImplementedError("RayExecutor.start: executable_cls is not supported "
                                          "on an elastic executor (min_workers); run functions")
            return self._elastic.start(extra_env_vars=extra_env_vars)
        if self._workers:
            raise RuntimeError("RayExecutor.start: already started")
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor.start: call ray.init() first")
        self._placement_group = self._reserve(self.num_workers)
        try:
            actors, wheres = self._start_actors(self._placement_group, self.num_workers)
            self._workers, self._placements = self._assign_ranks(actors, wheres)
            self._server, address, secret = self._serve_store()
            extra = dict(self.settings.env)
            extra.update(extra_env_vars or {})
            if self.settings.nics:
                extra.setdefault("RONDE_INTERFACE", sorted(self.settings.nics)[0])
            ray.get([worker.set_env.remote(_job_env.worker_env(placement, address, secret, extra))
                     for worker, placement in zip(self._workers, self._placements)],
                    timeout=self.settings.timeout_s)
            if executable_cls is not None:
                # Not bounded by timeout_s: a constructor may load a model or data.
                self._gather([worker.start_executable.remote(
                    executable_cls, list(executable_args or []), dict(executable_kwargs or {}))
                    for worker in self._workers])
        except BaseException:
            self.shutdown()
            raise

    # -- running -------------------------------------------------------------------------

    def _require_started(self):
        if not self._workers:
            raise RuntimeError("RayExecutor: call start() first")

    def _with_callbacks(self, callbacks, submit):
        """Runs submit() (-> refs in rank order) with ray_logger's queue on every actor."""
        import ray
        with CallbackPump(callbacks) as pump:
            if pump.queue is not None:
                ray.get([w.set_queue.remote(pump.queue) for w in self._workers],
                        timeout=self.settings.timeout_s)
            try:
                return self._gather(submit())
            finally:
                if pump.queue is not None and self._workers:
                    ray.get([w.set_queue.remote(None) for w in self._workers],
                            timeout=self.settings.timeout_s)

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts fn(*args, **kwargs) on every rank; returns Ray object refs in rank order."""
        if self._elastic is not None:
            raise NotImplementedError("RayExecutor.run_remote: not on an elastic executor "
                                      "(its world changes while it runs); use run()")
        self._require_started()
        args, kwargs = list(args or []), dict(kwargs or {})
        return [worker.execute.remote(fn, args, kwargs) for worker in self._workers]

    def _gather(self, refs):
        """Waits for every rank; the first failure (an exception or a dead actor) fails all."""
        import ray
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            self._check_finished(refs, done[0])
        return ray.get(list(refs))

    def _check_finished(self, refs, ref):
        """Returns if the finished rank's ref holds a result; if it holds a failure (an
        exception or a dead actor), stops every rank and raises naming the rank and node."""
        import ray
        try:
            ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            rank = refs.index(ref)
            where = self._placements[rank]["where"]
            lost = isinstance(error, ray.exceptions.RayActorError)
            self.shutdown(graceful=False)  # the others may be blocked in a collective
            raise RuntimeError(
                "RayExecutor: rank %d on node %s (%s) %s:\n%s" %
                (rank, where["node_ip"], where["node_id"][:8],
                 "died (its actor or node was lost)" if lost else "failed", error)) from error

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs fn(*args, **kwargs) on every rank; returns the results in rank order.

        callbacks: callables the driver calls with every message a rank sends through
        ronde.ray.ray_logger.log() while the run goes on."""
        if self._elastic is not None:
            return self._elastic.run(fn, args, kwargs, callbacks=callbacks)
        self._require_started()
        return self._with_callbacks(callbacks, lambda: self.run_remote(fn, args, kwargs))

    def execute(self, fn, callbacks=None):
        """Runs fn(executable) on every rank, as Horovod does: the object start() made from
        executable_cls, or None without one; returns the results in rank order."""
        if self._elastic is not None:
            return self._elastic.run(fn, [None], callbacks=callbacks)
        self._require_started()
        return self._with_callbacks(
            callbacks, lambda: [w.execute_on_executable.remote(fn) for w in self._workers])

    def execute_single(self, fn):
        """Runs fn(executable) on rank 0 only (the chief), as Horovod does."""
        import ray
        if self._elastic is not None:
            raise NotImplementedError("RayExecutor.execute_single: not on an elastic executor")
        self._require_started()
        return ray.get(self._workers[0].execute_on_executable.remote(fn))

    def placements(self):
        """Per rank: its host key, local rank and size, cross rank and size, Ray node."""
        return [dict(p) for p in self._placements]

    def shutdown(self, graceful=True):
        """Stops every actor and frees the placement group and the store; safe to repeat.

        graceful: let each rank leave its runtime first (skipped after a failure, when the
        surviving ranks may sit in a collective that will never complete)."""
        import ray
        if self._elastic is not None:
            return self._elastic.shutdown()
        from ray.util.placement_group import remove_placement_group
        workers, self._workers = self._workers, []
        if workers and graceful:
            try:
                ray.get([w.shutdown_runtime.remote() for w in workers], timeout=10)
            except Exception:  # noqa: BLE001 - a dead actor cannot shut down; it is killed
                pass
        for worker in workers:
            ray.kill(worker)
        if self._placement_group is not None:
            if self._owns_placement_group:
                remove_placement_group(self._placement_group)
            self._placement_group = None
        if self._server is not None:
            self._server.close()
            self._server = None
