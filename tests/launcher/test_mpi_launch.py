"""`ronde run --mpi`: horovodrun's --mpi, --mpi-args and --binding-args. mpirun starts the
workers; ronde still places them and serves their rendezvous, so they train as without --mpi.

The allreduce test runs ronde.torch under RONDE_TEST_PYTHON (a python with torch and ronde).
"""
import os
import re
import shutil
import signal
import subprocess

import pytest

from conftest import pids_with, ronde_binary, run, unique_marker, wait_for

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

PYTHON = os.environ.get("RONDE_TEST_PYTHON")

IDENTITY = 'echo "rank=$RONDE_RANK size=$RONDE_SIZE local=$RONDE_LOCAL_RANK ' \
           'mpi=$OMPI_COMM_WORLD_RANK foo=$FOO"'

ALLREDUCE = """
import sys
import torch
import ronde.torch as hvd
hvd.init()
total = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), name="x", op=hvd.Sum)
assert total.tolist() == [3.0] * 4, total
# One write: mpirun's --tag-output tags what each write brings, not each line.
sys.stdout.write("sum %d %d %.1f\\n" % (hvd.rank(), hvd.size(), total.tolist()[0]))
"""

# mpirun's --tag-output lines: [jobid,rank]<stdout>:text
TAGGED = re.compile(r"^\[\d+,(\d+)\]<stdout>:(.*)$")


def mpi_lines(text):
    """{rank: [lines]} of mpirun's tagged stdout lines."""
    lines = {}
    for line in text.splitlines():
        match = TAGGED.match(line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def plain_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RONDE_", "HOROVOD_"))}
    env.update(extra)
    return env


def test_ranks_get_ronde_identity_from_mpirun():
    result = run(["run", "--mpi", "-np", "2", "/bin/sh", "-c", IDENTITY], env=plain_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert mpi_lines(result.stdout) == {
        r: ["rank=%d size=2 local=%d mpi=%d foo=" % (r, r, r)] for r in range(2)}


@pytest.mark.skipif(not PYTHON,
                    reason="RONDE_TEST_PYTHON (a python with torch and ronde) is not set")
def test_two_ranks_allreduce_through_ronde_torch(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(ALLREDUCE)
    result = run(["run", "--mpi", "-np", "2", PYTHON, str(script)], timeout=120, env=plain_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert mpi_lines(result.stdout) == {r: ["sum %d 2 3.0" % r] for r in range(2)}


def demo():
    path = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if not os.access(path, os.X_OK):
        pytest.skip("examples/allreduce_demo is not built")
    return path


@pytest.mark.parametrize("operations,over", [("native", "shm"), ("mpi", "mpi")])
def test_cpu_operations_stay_as_set(operations, over):
    if operations == "mpi" and "[X] MPI" not in run(["check-build"]).stdout:
        pytest.skip("this build has no MPI backend")
    result = run(["run", "--mpi", "-np", "2", demo(), "2", "2"], timeout=120,
                 env=plain_env(RONDE_CPU_OPERATIONS=operations))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 ranks over %s" % over in result.stdout and "result correct" in result.stdout


@pytest.mark.parametrize("spelling", [["--mpi-args=-x FOO=bar"], ["--mpi-args", "-x FOO=bar"]])
def test_mpi_args_reach_mpirun(spelling):
    result = run(["run", "--mpi", "-np", "2"] + spelling + ["/bin/sh", "-c", IDENTITY],
                 env=plain_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert [lines[0].endswith("foo=bar") for lines in mpi_lines(result.stdout).values()] == [
        True, True], result.stdout


def test_binding_args_replace_the_default():
    result = run(["run", "--mpi", "-np", "2", "--verbose", "--binding-args=-bind-to core",
                  "/bin/true"], env=plain_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "-bind-to core" in result.stderr and "-bind-to none" not in result.stderr
    # --verbose shows mpirun's command: the secret is exported by name, never written out.
    assert "-x RONDE_SECRET " in result.stderr and "RONDE_SECRET=" not in result.stderr


def test_a_failing_rank_fails_the_job():
    result = run(["run", "--mpi", "-np", "2", "/bin/sh", "-c", 'exit $((RONDE_RANK * 3))'],
                 env=plain_env())
    assert result.returncode == 3, result.stdout + result.stderr
    assert "mpirun exited with code 3" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_mpirun_and_every_rank(sig):
    marker = unique_marker()
    launcher = subprocess.Popen([ronde_binary(), "run", "--mpi", "-np", "2", "sleep", marker],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=plain_env())
    try:
        # two sleeps and mpirun (its command line names them) are up
        assert wait_for(lambda: len(pids_with(marker)) >= 3, 30), pids_with(marker)
        launcher.send_signal(sig)
        assert launcher.wait(timeout=30) == 128 + sig
        assert wait_for(lambda: not pids_with(marker), 10), pids_with(marker)
    finally:
        launcher.kill()
        launcher.communicate()


def test_config_file_controller_mpi(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("controller: mpi\n")
    result = run(["run", "--config-file", str(config), "-np", "2", "/bin/sh", "-c", IDENTITY],
                 env=plain_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(mpi_lines(result.stdout)) == [0, 1], result.stdout


@pytest.mark.parametrize("args,message", [
    (["--mpi", "--min-np", "1", "--host-discovery-script", "/bin/true"], "an elastic job"),
    (["--mpi", "--max-np", "4"], "an elastic job"),
    (["--mpi-args=-x A=1"], "--mpi-args are mpirun's arguments: give --mpi too"),
    (["--binding-args=-bind-to core"], "--binding-args are mpirun's arguments: give --mpi too"),
    (["--mpi", "--bind-to", "core"], "with --mpi, mpirun binds the ranks"),
    (["--mpi", "--mpi-args=-x 'A=1"], "unclosed '"),
    (["--mpi", "--gloo"], "excludes"),
])
def test_refusals(args, message):
    result = run(["run", "-np", "2"] + args + ["/bin/true"], env=plain_env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
