"""BaseDataLoader and AsyncDataLoaderMixin with Horovod's interface (horovod.data).

A loader implements `__len__` and `_iterate()` (one epoch's batches); `__iter__` yields them
through `_process_batch`, the hook trainers override to reshape batches. The mixin reads
batches on a background thread into a bounded queue, so that reading the next batch overlaps
the training step. As in Horovod the thread runs ahead across epochs: it starts the next
epoch's `_iterate()` as soon as the current one is read, and each `__iter__` ends at its
epoch's end.

Where ronde differs from Horovod's own: an error raised by `_iterate()` on the thread is
raised by the consumer's `__iter__` (the same exception, its traceback kept), and nothing
blocks forever: the thread's puts and the consumer's gets wake up to see a closed loader,
so `close_async_loader()` returns even while the thread waits on a full queue or inside a
slow `_iterate()` (after `close_timeout` seconds it stops waiting and says so).
"""

import logging
import queue
import threading

_log = logging.getLogger("ronde.data")

# Marks an epoch's end in the queue (Horovod uses None, which a loader may legitimately yield).
_EPOCH_END = object()
_POLL_SECONDS = 0.1


class BaseDataLoader(object):
    def __len__(self):
        """The number of batches in an epoch."""
        raise NotImplementedError()

    def _iterate(self):
        """Yields one epoch's batches; implemented by the loader."""
        raise NotImplementedError()

    def __iter__(self):
        for batch in self._iterate():
            yield self._process_batch(batch)

    def _process_batch(self, batch):
        """Hook applied to every batch before it is yielded (trainers override it)."""
        return batch


class _LoaderFailure(object):
    """An exception raised by `_iterate()` on the loader's thread, carried to the consumer."""

    def __init__(self, error):
        self.error = error


class AsyncDataLoaderMixin(object):
    """Reads batches on a background thread. Put it before the loader class:

        class AsyncLoader(AsyncDataLoaderMixin, MyLoader): ...

    async_loader_queue_size: batches read ahead (0: no thread, batches read in `__iter__`).
    debug_data_loader: log each batch's way through the queue (logger "ronde.data", DEBUG).
    """

    def __init__(self, async_loader_queue_size=64, debug_data_loader=False, *args, **kwargs):
        if async_loader_queue_size is None or int(async_loader_queue_size) < 0:
            raise ValueError("async_loader_queue_size must be >= 0 (0: no background thread), "
                             "not %r" % (async_loader_queue_size,))
        self.async_loader_queue_size = int(async_loader_queue_size)
        self.debug_data_loader = debug_data_loader
        self.close_timeout = 30.0
        super().__init__(*args, **kwargs)
        if self.async_loader_queue_size > 0:
            self.finished_event = threading.Event()
            self.queue = queue.Queue(self.async_loader_queue_size)
            self.thread = threading.Thread(target=self._async_worker, daemon=True,
                                           name="ronde-data-loader")
            self.started = False

    def _debug(self, message, *args):
        if self.debug_data_loader:
            _log.debug("async loader [queue %d]: " + message, self.async_loader_queue_size, *args)

    def _put(self, item):
        """Puts `item` unless the loader closes first; returns whether it was put."""
        while not self.finished_event.is_set():
            try:
                self.queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _async_worker(self):
        """The thread: reads epoch after epoch until the loader is closed."""
        epoch = 0
        while not self.finished_event.is_set():
            count = 0
            try:
                for batch in self._iterate():
                    if not self._put(batch):
                        return
                    count += 1
                    self._debug("epoch %d: batch %d queued", epoch, count)
            except Exception as error:  # raised again by the consumer, which must see it
                self._debug("epoch %d: _iterate() raised %r", epoch, error)
                self._put(_LoaderFailure(error))
                return
            self._debug("epoch %d: %d batches, end queued", epoch, count)
            if not self._put(_EPOCH_END):
                return
            epoch += 1

    def close_async_loader(self):
        """Stops the background thread: pending batches are dropped. Safe to call twice."""
        if self.async_loader_queue_size <= 0 or not self.started:
            return
        self.finished_event.set()
        self._drain()
        self.thread.join(self.close_timeout)
        if self.thread.is_alive():
            # _iterate() itself is blocked (reading a file, say): the daemon thread ends with
            # the process; nothing waits on it.
            _log.warning("ronde.data: the loader thread is still inside _iterate() after %.0f s; "
                         "left to finish on its own", self.close_timeout)
        self._drain()

    def _drain(self):
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                return

    def __iter__(self):
        if self.async_loader_queue_size <= 0:
            for batch in self._iterate():
                yield self._process_batch(batch)
            return
        if self.finished_event.is_set():
            raise RuntimeError("this data loader was closed (close_async_loader()); "
                               "make a new one to read again")
        if not self.started:
            self.started = True
            self.thread.start()
        while True:
            try:
                item = self.queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if self.finished_event.is_set():
                    return
                if not self.thread.is_alive() and self.queue.empty():
                    raise RuntimeError("the data loader's thread ended without ending the epoch")
                continue
            if item is _EPOCH_END:
                return
            if isinstance(item, _LoaderFailure):
                # The loader's own exception, as in Horovod; its traceback still shows where in
                # _iterate() it was raised.
                raise item.error
            yield self._process_batch(item)
