"""Horovod-style torch suite, run whole by every rank of `ronde run -np N` (N = 2, 3, 4; shm
and --tcp). Each test is a unittest.TestCase method whose setUp calls hvd.init() and whose
tearDown calls hvd.barrier() and hvd.shutdown(), as in Horovod's test/parallel/test_torch.py:
every rank runs the same tests in the same order, so a test's collectives meet their peers.

A hang must fail, not stall CI: every test runs under a watchdog (RONDE_TEST_TIMEOUT seconds,
default 60). When it fires, the rank prints which test hung, dumps every thread's stack and
exits with status 1, so that `ronde run` ends the job and ctest reports the failure. A second,
C-level faulthandler timer does the same a few seconds later if the hung thread holds the GIL
(the Python timer then cannot run)."""

import faulthandler
import os
import sys
import threading

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

TIMEOUT = float(os.environ.get("RONDE_TEST_TIMEOUT", "60"))


def _rank():
    return os.environ.get("HOROVOD_RANK", "?")


# pytest captures file descriptor 2 during tests, and a rank that exits from a hung test would
# take its captured output with it: the watchdog writes to a copy of the real stderr, taken
# with capture suspended for a moment.
_stderr = {}


def pytest_configure(config):
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=False)
    try:
        _stderr["file"] = os.fdopen(os.dup(2), "w")
    finally:
        if capman is not None:
            capman.resume_global_capture()
    _stderr["capman"] = capman


def _hung(nodeid):
    out = _stderr["file"]
    capman = _stderr.get("capman")
    if capman is not None:
        try:  # what the hung test printed so far
            captured_out, captured_err = capman.read_global_capture()
            out.write(captured_out + captured_err)
        except Exception:  # noqa: BLE001 - the stacks below matter more
            pass
    out.write("\nTIMEOUT: rank %s: %s did not finish in %.0f s; stacks:\n"
              % (_rank(), nodeid, TIMEOUT))
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    out.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Armed around setup, call and teardown: a hang in tearDown's barrier counts too.
    timer = threading.Timer(TIMEOUT, _hung, args=(item.nodeid,))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(TIMEOUT + 5.0, exit=True, file=_stderr["file"])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        timer.cancel()
