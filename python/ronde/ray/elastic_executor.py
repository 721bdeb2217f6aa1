"""ronde.ray.ElasticRayExecutor: an elastic ronde job whose workers are Ray actors.

The driver here plays the part of `ronde run --host-discovery-script` (src/launcher/
elastic_driver.cc) with Ray as the host discovery and Ray actors as the worker processes:
it watches the cluster's alive nodes, starts one actor per free slot up to max_workers, and
for every world writes each worker's place under elastic/gen/<G>/assign/<worker> in the
job's store before publishing G, through the same C++ key and format functions the workers
parse (ronde._core.elastic_assignment_key / format_elastic_assignment). The workers are
ordinary elastic workers (RONDE_ELASTIC=1): hvd.init() waits for their place, and the
user's @hvd.elastic.run loop restores, re-forms and syncs when a peer is lost or a
generation is published.
"""

import itertools
import time

from ronde import _job_env
from ronde.ray.callbacks import CallbackPump
from ronde.ray.runner import RaySettings, _Worker


class ElasticRaySettings(RaySettings):
    """RaySettings plus the elastic limits (the `ronde run` flags of the same meaning).

    elastic_timeout_s: how long the job may have fewer than min_workers slots (and how long
    the workers wait for their next world, plus 30 s). reset_limit: most re-formings (None:
    no limit). discovery_interval_s: how often the cluster's nodes are read. reset_grace_s:
    how long a worker's request for a new world waits for Ray to report the actor or node it
    lost (a world formed with a dead worker only fails again after the start timeout).
    """

    def __init__(self, timeout_s=60, env=None, nics=None, verbose=1, elastic_timeout_s=600,
                 reset_limit=None, discovery_interval_s=1.0, reset_grace_s=5.0,
                 min_num_proc=1, max_num_proc=None):
        super().__init__(timeout_s=timeout_s, env=env, nics=nics, verbose=verbose)
        # Horovod's ElasticSettings carry the bounds; ElasticRayExecutor takes them from here.
        self.min_num_proc = min_num_proc
        self.max_num_proc = max_num_proc
        self.elastic_timeout_s = float(elastic_timeout_s)
        self.reset_limit = reset_limit
        self.discovery_interval_s = float(discovery_interval_s)
        self.reset_grace_s = float(reset_grace_s)


class _ElasticWorker:
    """One actor: its id in the store ("r<n>"), its Ray node, its running task."""

    def __init__(self, worker_id, node_id, node_ip, actor):
        self.id = worker_id
        self.node_id = node_id
        self.node_ip = node_ip
        self.actor = actor
        self.ref = None
        self.rank = -1          # in the newest generation; -1: not placed yet
        self.stopping = False   # stopped by the driver: its end is no failure
        self.silent_reporter = None  # the rank that found it silent (a stopped worker)
        self.done = False
        self.result = None


def _alive_nodes(ray, bundle):
    """node id -> (ip, slots) for every alive Ray node that can hold a worker."""
    nodes = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        slots = min(int(resources.get(name, 0) // amount) for name, amount in bundle.items())
        if slots > 0:
            nodes[node["NodeID"]] = (node["NodeManagerAddress"], slots)
    return nodes


class ElasticRayExecutor:
    """Runs an elastic training function on min_workers..max_workers Ray actors.

    executor = ElasticRayExecutor(ElasticRayExecutor.create_settings(timeout_s=60),
                                  min_workers=1, max_workers=4, cpus_per_worker=1)
    executor.start()
    results = executor.run(train)   # train calls hvd.init() and @hvd.elastic.run itself
    executor.shutdown()
    """

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600,
                        timeout_s=60, ssh_identity_file=None, nics=None, min_np=None,
                        max_np=None, env=None, verbose=1, elastic_timeout_s=None,
                        discovery_interval_s=1.0, reset_grace_s=5.0):
        """Horovod's ElasticRayExecutor.create_settings (min_np/max_np deprecated as there;
        ssh_identity_file: nothing is reached over ssh on Ray, as in Horovod's Ray mode), plus
        ronde's: env, verbose, elastic_timeout_s (another name of elastic_timeout),
        discovery_interval_s and reset_grace_s."""
        import warnings
        if min_np is not None:
            min_num_proc = min_np
            warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
        if max_np is not None:
            max_num_proc = max_np
            warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
        del ssh_identity_file
        return ElasticRaySettings(timeout_s=timeout_s, env=env, nics=nics, verbose=verbose,
                                  elastic_timeout_s=(elastic_timeout if elastic_timeout_s is None
                                                     else elastic_timeout_s),
                                  reset_limit=reset_limit,
                                  discovery_interval_s=discovery_interval_s,
                                  reset_grace_s=reset_grace_s, min_num_proc=min_num_proc,
                                  max_num_proc=max_num_proc)

    def __init__(self, settings=None, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None,
                 env_vars=None, override_discovery=True, min_workers=None, max_workers=None,
                 cpus_per_worker=None, gpus_per_worker=None):
        """Horovod's parameters (the bounds come from the settings' min_num_proc and
        max_num_proc; env_vars are set on every worker), and ronde's older names:
        min_workers/max_workers override the settings' bounds, cpus_per_worker and
        gpus_per_worker are cpus_per_slot and gpus_per_slot."""
        if not override_discovery:
            raise NotImplementedError("ElasticRayExecutor: override_discovery=False (a discovery "
                                      "of your own) is not supported: the workers come from "
                                      "Ray's alive nodes")
        if settings is not None and not isinstance(settings, ElasticRaySettings):
            raise TypeError("ElasticRayExecutor: settings come from "
                            "ElasticRayExecutor.create_settings()")
        settings = settings or ElasticRaySettings()
        if env_vars:
            settings.env = dict(settings.env, **env_vars)
        min_workers = settings.min_num_proc if min_workers is None else min_workers
        max_workers = settings.max_num_proc if max_workers is None else max_workers
        cpus_per_worker = cpus_per_slot if cpus_per_worker is None else cpus_per_worker
        gpus_per_worker = gpus_per_slot if gpus_per_worker is None else gpus_per_worker
        if not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError("ElasticRayExecutor: min_workers must be a positive integer, not %r"
                             % (min_workers,))
        if max_workers is not None and (not isinstance(max_workers, int)
                                        or max_workers < min_workers):
            raise ValueError("ElasticRayExecutor: max_workers must be an integer >= min_workers "
                             "(%d), not %r" % (min_workers, max_workers))
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError("ElasticRayExecutor: gpus_per_worker needs use_gpu=True")
        if cpus_per_worker <= 0:
            raise ValueError("ElasticRayExecutor: cpus_per_worker must be positive, not %r"
                             % (cpus_per_worker,))
        self.settings = settings
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self._server = None
        self._store = None
        self._address = None
        self._secret = None
        self._extra_env = {}
        self._ids = itertools.count()
        self._generation = 0
        self._workers = []       # of the current run, every one ever started
        self._generations = []   # per published generation: the worker ids in rank order
        self._queue = None       # ray_logger's queue of the current run (callbacks given)

    def _bundle(self):
        bundle = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker
        return bundle

    def _log(self, *parts):
        if self.settings.verbose:
            print("ElasticRayExecutor:", *parts, flush=True)

    def start(self, extra_env_vars=None):
        """Serves the job's store; the workers start with run()."""
        import ray
        from ronde import _core
        if self._server is not None:
            raise RuntimeError("ElasticRayExecutor.start: already started")
        if not ray.is_initialized():
            raise RuntimeError("ElasticRayExecutor.start: call ray.init() first")
        self._secret = _job_env.make_secret()
        self._server = _core.TcpStoreServer("0.0.0.0", 0, self._secret)
        self._address = "%s:%d" % (ray.util.get_node_ip_address(), self._server.port)
        self._store = _core.TcpStore("127.0.0.1", self._server.port, self._secret,
                                     self.settings.timeout_s)
        self._extra_env = dict(self.settings.env)
        self._extra_env.update(extra_env_vars or {})
        if self.settings.nics:
            self._extra_env.setdefault("RONDE_INTERFACE", sorted(self.settings.nics)[0])

    # -- the driver loop ------------------------------------------------------------------

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs fn(*args, **kwargs) on an elastic world of Ray actors until one returns.

        Returns the results of the workers that finished, in the rank order of the last
        generation. A worker whose fn raises fails the run (a bug, not a lost host);
        fewer than min_workers slots for elastic_timeout_s or more than reset_limit
        re-formings end it with RuntimeError; in every case the actors are stopped.
        callbacks: called on the driver with every message a worker sends through
        ronde.ray.ray_logger.log(), workers started later in the run included."""
        if self._server is None:
            raise RuntimeError("ElasticRayExecutor: call start() first")
        self._fn = (fn, list(args or []), dict(kwargs or {}))
        with CallbackPump(callbacks) as pump:
            self._queue = pump.queue
            try:
                return self._drive()
            finally:
                self._queue = None
                self._stop_all()

    def _live(self):
        return [w for w in self._workers if not w.done and not w.stopping]

    def _drive(self):
        import ray
        from ronde import _core
        s = self.settings
        blacklist = set()            # node ids whose worker died
        nodes = {}
        next_discovery = 0.0
        reform = True
        resets = 0
        short_since = None
        reset_seen_at = None
        deaths_since_reset = 0
        finishing_since = None
        current_world = None
        while True:
            now = time.monotonic()
            if now >= next_discovery:
                next_discovery = now + s.discovery_interval_s
                found = _alive_nodes(ray, self._bundle())
                if found.keys() != nodes.keys() or any(found[k] != nodes[k] for k in found):
                    reform = True
                nodes = found
            died = self._reap(ray)
            if died:
                for worker in died:
                    blacklist.add(worker.node_id)
                reform = True
                deaths_since_reset += len(died)
            if finishing_since is not None:
                if not self._live():
                    break
                if now - finishing_since > s.elastic_timeout_s:
                    raise RuntimeError("ElasticRayExecutor: a worker finished, but %s did not "
                                       "within elastic_timeout_s %gs"
                                       % (", ".join(w.id for w in self._live()),
                                          s.elastic_timeout_s))
                time.sleep(0.05)
                continue
            if any(w.done for w in self._workers):
                finishing_since = now  # training is over: no new generation
                continue
            if not reform and self._generation > 0:
                key = _core.elastic_reset_request_key(self._generation)
                if self._store.try_get(key) is not None:
                    # A stopped (SIGSTOP) or wedged worker: Ray sees its actor alive, only its
                    # heartbeat stopped. Its peers recorded it; killed and its node left out,
                    # it is a lost worker, or the next world would wait for it again.
                    for worker in self._silent_workers(_core):
                        self._log("worker %s (rank %d) on node %s stopped answering (noticed by "
                                  "rank %s); killing it and re-forming without its node"
                                  % (worker.id, worker.rank, worker.node_ip,
                                     worker.silent_reporter))
                        self._stop(worker)
                        blacklist.add(worker.node_id)
                        reform = True
                    # A worker lost a peer; give Ray a moment to say which, so that the next
                    # world does not include a dead worker.
                    if reset_seen_at is None:
                        reset_seen_at = now
                        deaths_since_reset = 0
                    if deaths_since_reset > 0 or now - reset_seen_at >= s.reset_grace_s:
                        reform = True
            if reform:
                outcome = self._reform(nodes, blacklist, current_world)
                if outcome == "short":
                    if short_since is None:
                        short_since = now
                        self._log("only %d slot(s) for at least min_workers=%d; waiting up to "
                                  "%gs" % (self._slots(nodes, blacklist), self.min_workers,
                                           s.elastic_timeout_s))
                    elif now - short_since > s.elastic_timeout_s:
                        raise RuntimeError(
                            "ElasticRayExecutor: fewer than min_workers=%d slots of %s for "
                            "elastic_timeout_s %gs (alive nodes: %s)"
                            % (self.min_workers, self._bundle(), s.elastic_timeout_s,
                               {k[:8]: v for k, v in nodes.items()}))
                else:
                    short_since = None
                    reform = False
                    if outcome is not None:
                        if current_world is not None:
                            resets += 1
                            if s.reset_limit is not None and resets > s.reset_limit:
                                raise RuntimeError(
                                    "ElasticRayExecutor: reset_limit %d exceeded: the world "
                                    "would re-form for the %dth time" % (s.reset_limit, resets))
                        current_world = outcome
                        self._publish(outcome)
                        reset_seen_at = None
            running = [w.ref for w in self._live() if w.ref is not None]
            if running:
                ray.wait(running, timeout=0.05)  # returns early when a worker ends
            else:
                time.sleep(0.05)
        return [w.result for w in sorted((w for w in self._workers if w.done),
                                         key=lambda w: w.rank)]

    def _silent_workers(self, core):
        """The live workers of the newest generation that a peer recorded as silent."""
        silent = []
        for worker in self._live():
            if worker.rank < 0:
                continue
            reporter = self._store.try_get(core.elastic_silent_key(self._generation,
                                                                   worker.rank))
            if reporter is not None:
                worker.silent_reporter = reporter.decode(errors="replace")
                silent.append(worker)
        return silent

    def _reap(self, ray):
        """Collects the workers whose task ended: returns those that died (actor or node
        lost); a worker whose fn raised fails the run."""
        died = []
        for worker in self._live():
            if worker.ref is None:
                continue
            done, _ = ray.wait([worker.ref], timeout=0)
            if not done:
                continue
            try:
                worker.result = ray.get(worker.ref)
                worker.done = True
            except ray.exceptions.RayActorError as error:
                worker.stopping = True
                self._log("worker %s (rank %d) on node %s (%s) was lost, re-forming without "
                          "it: %s" % (worker.id, worker.rank, worker.node_ip,
                                      worker.node_id[:8], str(error).splitlines()[0]))
                died.append(worker)
            except ray.exceptions.RayTaskError as error:
                raise RuntimeError("ElasticRayExecutor: worker %s (rank %d) on node %s (%s) "
                                   "failed:\n%s" % (worker.id, worker.rank, worker.node_ip,
                                                    worker.node_id[:8], error)) from error
        return died

    def _slots(self, nodes, blacklist):
        return sum(slots for node, (_, slots) in nodes.items() if node not in blacklist)

    def _reform(self, nodes, blacklist, current_world):
        """The next world, as (worker, host) in rank order, or None when it equals the
        current one, or "short" when it would have fewer than min_workers."""
        from ronde import _core
        max_workers = self.max_workers if self.max_workers is not None else float("inf")
        used = {}
        world = []
        # Survivors first, in their old rank order; those whose node left are stopped.
        survivors = sorted(self._live(), key=lambda w: (w.rank < 0, w.rank))
        for worker in survivors:
            room = nodes.get(worker.node_id, (None, 0))[1]
            if used.get(worker.node_id, 0) >= room or len(world) >= max_workers:
                self._log("stopping worker %s on node %s (%s)" % (
                    worker.id, worker.node_ip, "node gone" if room == 0 else "beyond max_workers"))
                self._stop(worker)
                continue
            used[worker.node_id] = used.get(worker.node_id, 0) + 1
            world.append(worker)
        free = [(node, ip) for node, (ip, slots) in sorted(nodes.items()) if node not in blacklist
                for _ in range(slots - used.get(node, 0))]
        if len(world) + min(len(free), max_workers - len(world)) < self.min_workers:
            return "short"
        for node, ip in free:
            if len(world) >= max_workers:
                break
            worker = _ElasticWorker("r%d" % next(self._ids), node, ip, None)
            self._workers.append(worker)
            world.append(worker)
        forced = self._generation > 0 and self._store.try_get(
            _core.elastic_reset_request_key(self._generation)) is not None
        ids = sorted(w.id for w in world)
        if current_world is not None and not forced and \
                ids == sorted(w.id for w in current_world):
            return None
        return world

    def _publish(self, unordered):
        """Writes every worker's place in the next generation, publishes it, then starts
        the new workers (they find their place already there)."""
        import ray
        from ronde import _core
        nodes_by_ip = {}
        for worker in unordered:
            nodes_by_ip.setdefault(worker.node_ip, set()).add(worker.node_id)
        unique = all(len(ids) == 1 for ids in nodes_by_ip.values())

        def host(worker):
            # A Ray node is a host (the RayExecutor's convention): its IP, or IP/ray-<id>
            # when Ray nodes share an IP (ray.cluster_utils).
            return worker.node_ip if unique else "%s/ray-%s" % (worker.node_ip,
                                                                  worker.node_id[:8])

        order = []
        for worker in unordered:
            if host(worker) not in order:
                order.append(host(worker))
        world = sorted(unordered, key=lambda w: order.index(host(w)))  # stable: old rank order
        generation = self._generation + 1
        for worker, place in zip(world, _job_env.placements([host(w) for w in world])):
            value = _core.format_elastic_assignment(
                place["rank"], place["size"], place["local_rank"], place["local_size"],
                place["cross_rank"], place["cross_size"], place["host"])
            self._store.set(_core.elastic_assignment_key(generation, worker.id), value.encode())
            worker.rank = place["rank"]
        # Published last: a worker that sees the number finds its assignment already there.
        self._generation = self._store.add(_core.ELASTIC_GENERATION_KEY, 1)
        if self._generation != generation:
            raise RuntimeError("ElasticRayExecutor: generation %d in the store, expected %d "
                               "(another driver on this store?)" % (self._generation, generation))
        self._generations.append([w.id for w in world])
        self._log("generation %d: %d worker(s) [%s]" % (generation, len(world), " ".join(
            "%s@%s" % (w.id, host(w)) for w in world)))
        for worker in world:
            if worker.actor is None:
                self._spawn(ray, worker, host(worker))

    def _spawn(self, ray, worker, hostname):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        actor_class = ray.remote(_Worker)
        worker.actor = actor_class.options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
            scheduling_strategy=NodeAffinitySchedulingStrategy(worker.node_id, soft=False),
        ).remote()
        env = {"RONDE_ELASTIC": "1", "RONDE_ELASTIC_WORKER_ID": worker.id,
               "RONDE_HOSTNAME": hostname, "RONDE_STORE_ADDRESS": self._address,
               "RONDE_SECRET": self._secret,
               # A worker waits for its next world at most as long as the driver waits.
               "RONDE_ELASTIC_TIMEOUT_SECONDS": str(int(self.settings.elastic_timeout_s) + 30)}
        env.update(self._extra_env)
        # Calls on one actor run in order: the environment and the callbacks' queue are set
        # before fn starts.
        worker.actor.set_env.remote(env)
        if self._queue is not None:
            worker.actor.set_queue.remote(self._queue)
        fn, args, kwargs = self._fn
        worker.ref = worker.actor.execute.remote(fn, args, kwargs)

    def _stop(self, worker):
        import ray
        worker.stopping = True
        if worker.actor is not None:
            ray.kill(worker.actor, no_restart=True)

    def _stop_all(self):
        import ray
        for worker in self._workers:
            if worker.actor is not None:
                try:
                    ray.kill(worker.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone with its node
                    pass
        self._workers = []

    def workers(self):
        """The workers of the current run: id (RONDE_ELASTIC_WORKER_ID), rank in the newest
        generation (-1: not placed), Ray node id and IP, and state (running, finished,
        stopped: lost or stopped by the driver)."""
        return [{"id": w.id, "rank": w.rank, "node_id": w.node_id, "node_ip": w.node_ip,
                 "state": "finished" if w.done else "stopped" if w.stopping else "running"}
                for w in self._workers]

    def generations(self):
        """Every generation published so far: its worker ids in rank order."""
        return [list(ids) for ids in self._generations]

    def shutdown(self):
        """Stops every actor and closes the store; safe to repeat."""
        self._stop_all()
        self._store = None
        if self._server is not None:
            self._server.close()
            self._server = None
