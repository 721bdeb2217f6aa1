"""ronde.data: Horovod's BaseDataLoader and AsyncDataLoaderMixin. Batches come out in order,
epoch by epoch, through _process_batch; the background thread reads ahead no further than its
queue; a loader error reaches the consumer as the same exception; closing never hangs."""

import threading
import time

import pytest

from ronde.data import AsyncDataLoaderMixin, BaseDataLoader


class ListLoader(BaseDataLoader):
    def __init__(self, batches, fail_at=None, block=None):
        self.batches = list(batches)
        self.fail_at = fail_at
        self.block = block
        self.produced = 0
        self.epochs_started = 0

    def __len__(self):
        return len(self.batches)

    def _iterate(self):
        self.epochs_started += 1
        for i, b in enumerate(self.batches):
            if self.fail_at is not None and i == self.fail_at:
                raise KeyError("bad record %d" % i)
            if self.block is not None:
                self.block.wait()
            self.produced += 1
            yield b


class Doubling(ListLoader):
    def _process_batch(self, batch):
        return batch * 2


class AsyncListLoader(AsyncDataLoaderMixin, ListLoader):
    pass


class AsyncDoubling(AsyncDataLoaderMixin, Doubling):
    pass


def test_base_loader_yields_processed_batches():
    loader = Doubling(range(5))
    assert len(loader) == 5
    assert list(loader) == [0, 2, 4, 6, 8]
    assert list(loader) == [0, 2, 4, 6, 8]  # a second epoch


def test_base_loader_is_abstract():
    with pytest.raises(NotImplementedError):
        len(BaseDataLoader())
    with pytest.raises(NotImplementedError):
        list(BaseDataLoader())


@pytest.mark.parametrize("queue_size", [0, 1, 3, 64])
def test_async_loader_gives_every_epoch_in_order(queue_size):
    loader = AsyncDoubling(queue_size, False, range(7))
    try:
        for _ in range(3):
            assert list(loader) == [0, 2, 4, 6, 8, 10, 12]
        # A batch that is None is data, not the end of an epoch.
        plain = AsyncListLoader(queue_size, False, [1, None, 3])
        try:
            assert [list(plain) for _ in range(3)] == [[1, None, 3]] * 3
        finally:
            plain.close_async_loader()
    finally:
        loader.close_async_loader()


def test_async_loader_reads_ahead_only_as_far_as_its_queue():
    loader = AsyncListLoader(2, False, range(100))
    try:
        it = iter(loader)
        assert next(it) == 0
        deadline = time.monotonic() + 5
        while loader.produced < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        # One taken, two in the queue, one held by the thread waiting for room.
        assert 3 <= loader.produced <= 4, loader.produced
    finally:
        loader.close_async_loader()


def test_async_loader_error_reaches_the_consumer_as_itself():
    loader = AsyncListLoader(4, False, range(10), fail_at=3)
    try:
        seen = []
        with pytest.raises(KeyError, match="bad record 3") as info:
            for b in loader:
                seen.append(b)
        assert seen == [0, 1, 2]
        # The traceback still shows where in _iterate() it was raised.
        assert any(frame.name == "_iterate" for frame in info.traceback)
        # The loader's thread has ended: a further epoch fails instead of waiting forever.
        with pytest.raises(RuntimeError, match="thread ended"):
            list(loader)
    finally:
        loader.close_async_loader()


def test_close_returns_while_the_thread_waits_on_a_full_queue():
    loader = AsyncListLoader(1, False, range(1000))
    it = iter(loader)
    assert next(it) == 0
    time.sleep(0.2)  # the thread now blocks: the queue is full
    started = time.monotonic()
    loader.close_async_loader()
    assert not loader.thread.is_alive()
    assert time.monotonic() - started < 5
    loader.close_async_loader()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        list(loader)


def test_close_does_not_wait_forever_on_a_blocked_iterate():
    gate = threading.Event()
    loader = AsyncListLoader(2, False, range(3), block=gate)
    loader.close_timeout = 0.5
    it = iter(loader)
    reader = threading.Thread(target=lambda: next(it, None), daemon=True)
    reader.start()
    time.sleep(0.2)
    started = time.monotonic()
    loader.close_async_loader()
    assert time.monotonic() - started < 3
    gate.set()  # let the thread finish
    loader.thread.join(5)
    assert not loader.thread.is_alive()


def test_bad_queue_size_is_refused():
    with pytest.raises(ValueError, match="async_loader_queue_size"):
        AsyncListLoader(-1, False, [1])
