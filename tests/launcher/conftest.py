"""Shared pieces of the launcher's end-to-end tests."""
import os
import re
import shutil
import subprocess
import time

import pytest

LINE = re.compile(r"^\[(\d+)\]<(stdout|stderr)>:(.*)$")


def ronde_binary():
    path = os.environ.get("RONDE_BIN") or shutil.which("ronde")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("set RONDE_BIN to the ronde binary (ctest does this)")
    return path


@pytest.fixture
def ronde():
    return ronde_binary()


def run(args, timeout=60, **kwargs):
    """Runs `ronde ARGS`; returns the CompletedProcess with text output."""
    return subprocess.run([ronde_binary()] + list(args), capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def rank_lines(text, stream="stdout"):
    """{rank: [lines]} of the prefixed lines of `stream` in `text`."""
    lines = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match and match.group(2) == stream:
            lines.setdefault(int(match.group(1)), []).append(match.group(3))
    return lines


def unique_marker():
    """A sleep duration nobody else uses: it marks our workers' command lines for pgrep."""
    return "%d.%06d" % (900000 + os.getpid() % 90000, int(time.time() * 1e6) % 1000000)


def pids_with(marker):
    result = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    own = {os.getpid()}
    return [int(p) for p in result.stdout.split() if int(p) not in own]


def wait_for(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def pytest_sessionfinish(session, exitstatus):
    # Where every test was skipped (no namespaces here), tell ctest so: exit 77 = skipped.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    passed = len(reporter.stats.get("passed", []))
    skipped = len(reporter.stats.get("skipped", []))
    if skipped > 0 and passed == 0:
        session.exitstatus = 77
