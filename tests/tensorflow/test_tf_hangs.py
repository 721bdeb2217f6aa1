"""One-sided waits through ronde.tensorflow's kernels raise instead of hanging, in every mode
(docs/runtime.md, "Deadlocks and join"). TensorFlow's asynchronous kernels wait for a
callback, not in a thread the runtime can see blocked; the deadlock detector counts their
requests as waited on (runtime.h, Request::on_done), so a rank whose step waits in a kernel
is found as blocked as a torch rank waiting in synchronize()."""

import os

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd
from modes import MODES, failure_class, run


def _restart_with(name, value):
    """Restarts the runtime with the setting `name` (every rank does the same, in step)."""
    hvd.shutdown()
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    hvd.init()
    return old


@pytest.fixture
def quick_detector():
    # Deadlocks are found after the stall check time: short here, 60 s by default.
    old = _restart_with("RONDE_STALL_CHECK_TIME_SECONDS", "0.5")
    yield
    _restart_with("RONDE_STALL_CHECK_TIME_SECONDS", old)


@pytest.mark.parametrize("mode", MODES)
def test_one_sided_waits_raise_on_every_rank(mode, quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    # Rank 0 waits for an allreduce the others never submit, and they for one rank 0 never
    # submits: before the detector saw kernels, this hung every rank for good.
    name = "left" if hvd.rank() == 0 else "right"
    expected = failure_class(mode, tf.errors.FailedPreconditionError)
    with pytest.raises(expected) as caught:
        run(mode, lambda x: hvd.allreduce(x, name=name, op=hvd.Sum),
            (np.ones(3), tf.float32))
    message = str(caught.value)
    assert "deadlock" in message, message
    assert "rank 0 waits for allreduce 'allreduce.left', which rank 1" in message, message
    assert "rank 1 waits for allreduce 'allreduce.right', which rank 0" in message, message
    if mode == "eager":
        assert isinstance(caught.value, hvd.MismatchError)
    # The runtime serves the next collectives, the names free again.
    for again in ("left", "right"):
        out = run(mode, lambda x: hvd.allreduce(x, name=again, op=hvd.Sum),
                  (np.ones(3), tf.float32))
        assert out.tolist() == [float(hvd.size())] * 3


def test_a_rank_that_computes_beside_a_pending_kernel_is_not_deadlocked(quick_detector):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    # The last rank is busy (sleeping) for five detection times before it submits; the others
    # wait in a kernel meanwhile. Not every rank waits: no deadlock, the allreduce completes.
    import time
    if hvd.rank() == hvd.size() - 1:
        time.sleep(2.5)
    out = hvd.allreduce(tf.ones(2), name="late", op=hvd.Sum)
    assert out.numpy().tolist() == [float(hvd.size())] * 2
