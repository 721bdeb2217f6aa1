"""How a job ends: a script that never calls hvd.shutdown() leaves cleanly and silently, as
under Horovod (which shuts down at exit), while a rank that really dies is still reported.

The workers are Python scripts on ronde.torch: RONDE_TEST_PYTHON names an interpreter with
torch and an installed ronde (ctest sets it to the first of RONDE_TEST_PYTHONS).
"""
import os
import subprocess

import pytest

from conftest import rank_lines, run

PYTHON = os.environ.get("RONDE_TEST_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON, reason="RONDE_TEST_PYTHON (a python with torch and ronde) is not set")

SCRIPT = """
import os, sys, time
import torch
import ronde.torch as hvd
hvd.init()
total = hvd.allreduce(torch.ones(4), name="x", op=hvd.Sum)
assert total.tolist() == [float(hvd.size())] * 4, total
mode = sys.argv[1]
if mode == "late" and hvd.rank() == 1:
    time.sleep(2)  # rank 0 reaches the end (and its exit) first
if mode == "kill":
    if hvd.rank() == 1:
        os.kill(os.getpid(), 9)
    time.sleep(0.5)
    hvd.allreduce(torch.ones(4), name="y")  # the dead rank never joins this one
print("done", hvd.rank())
"""


def run_script(tmp_path, mode, ranks=2):
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    return run(["run", "-np", str(ranks), PYTHON, str(script), mode], timeout=120)


@pytest.mark.parametrize("mode,ranks", [("together", 2), ("late", 2), ("together", 3)])
def test_exit_without_shutdown_is_clean_and_silent(tmp_path, mode, ranks):
    result = run_script(tmp_path, mode, ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    assert rank_lines(result.stdout) == {r: ["done %d" % r] for r in range(ranks)}
    assert result.stderr == "", result.stderr


def test_a_killed_rank_is_still_reported(tmp_path):
    result = run_script(tmp_path, "kill")
    assert result.returncode != 0
    assert "rank 1 on host %s killed by signal 9" % os.uname().nodename in result.stderr, result.stderr
    assert "stopping the other 1 rank" in result.stderr
    assert "done" not in result.stdout
