"""The driver's side of ray_logger: a queue the ranks' actors write to during one run, and a
thread on the driver that calls every callback with every message as it arrives, so that a
callback sees training progress while the run goes on (Horovod calls them for rank 0's
messages; ronde for every rank's, each message once)."""

import threading

_POLL_S = 0.05


class CallbackPump:
    """`with CallbackPump(callbacks) as pump:` around a run; pump.queue goes to the actors.

    A callback that raises stops the pump; the error is raised when the run's `with` block
    ends, after the run (the ranks are not interrupted by a driver-side bug). With no
    callbacks there is no queue and no thread."""

    def __init__(self, callbacks):
        self.callbacks = list(callbacks or [])
        for callback in self.callbacks:
            if not callable(callback):
                raise TypeError("callbacks must be callables, not %r" % (callback,))
        self.queue = None
        self._thread = None
        self._stop = threading.Event()
        self._error = None

    def __enter__(self):
        if self.callbacks:
            from ray.util.queue import Queue
            self.queue = Queue(actor_options={"num_cpus": 0})
            self._thread = threading.Thread(target=self._pump, daemon=True,
                                            name="ronde-ray-callbacks")
            self._thread.start()
        return self

    def _deliver(self, message):
        if self._error is not None:
            return
        try:
            for callback in self.callbacks:
                callback(message)
        except Exception as error:  # raised on the driver once the run is over
            self._error = error

    def _pump(self):
        from ray.util.queue import Empty
        while not self._stop.is_set():
            try:
                self._deliver(self.queue.get(timeout=_POLL_S))
            except Empty:
                continue

    def __exit__(self, kind, value, traceback):
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        # What the ranks sent before they returned and the thread had not taken yet.
        while not self.queue.empty():
            self._deliver(self.queue.get_nowait())
        self.queue.shutdown()
        if kind is None and self._error is not None:
            raise RuntimeError("a RayExecutor callback raised %s: %s"
                               % (type(self._error).__name__, self._error)) from self._error
        return False
