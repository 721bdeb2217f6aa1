"""Workers started by mpirun (OpenMPI) or srun (Slurm) meet without `ronde run`."""
import os
import shutil
import subprocess

import pytest


def demo():
    path = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if not os.access(path, os.X_OK):
        pytest.skip("examples/allreduce_demo is not built")
    return path


def mpirun_command(ranks):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun (OpenMPI) is not installed")
    command = [mpirun, "-np", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return command


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_under_mpirun(ranks):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RONDE_", "HOROVOD_"))}
    env["RONDE_EXAMPLES_DIR"] = os.environ.get("RONDE_EXAMPLES_DIR", "")
    result = subprocess.run(mpirun_command(ranks) + [demo(), "2", "2"], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%d ranks" % ranks in result.stdout and "result correct" in result.stdout


def plain_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RONDE_", "HOROVOD_"))}
    env["RONDE_EXAMPLES_DIR"] = os.environ.get("RONDE_EXAMPLES_DIR", "")
    return env


def check_build_has_mpi():
    ronde = os.environ.get("RONDE_BIN", "")
    if not os.access(ronde, os.X_OK):
        pytest.skip("the ronde binary is not built")
    out = subprocess.run([ronde, "check-build"], capture_output=True, text=True, timeout=60).stdout
    if "[X] MPI" not in out:
        pytest.skip("this build has no MPI backend")


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_on_the_mpi_backend(ranks):
    check_build_has_mpi()
    env = plain_env()
    env["HOROVOD_CPU_OPERATIONS"] = "MPI"  # Horovod's name for it works too
    result = subprocess.run(mpirun_command(ranks) + [demo(), "2", "2"], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%d ranks over mpi" % ranks in result.stdout, result.stdout
    assert "result correct" in result.stdout


TORCH_JOB = """
import torch
import ronde.torch as hvd
hvd.init()
x = torch.arange(6, dtype=torch.float32) * (hvd.rank() + 1)
total = hvd.allreduce(x, op=hvd.Sum, name="x")
n = hvd.size()
assert torch.equal(total, torch.arange(6, dtype=torch.float32) * (n * (n + 1) // 2)), total
avg = hvd.allreduce(torch.full((3,), float(hvd.rank())), name="avg")
assert torch.allclose(avg, torch.full((3,), (n - 1) / 2.0)), avg
g = hvd.allgather(torch.full((hvd.rank() + 1, 2), hvd.rank()), name="g")
assert g.shape[0] == n * (n + 1) // 2, g.shape
assert hvd.mpi_built() and hvd.mpi_enabled(), (hvd.mpi_built(), hvd.mpi_enabled())
print("torch job on the mpi backend: rank", hvd.rank())
hvd.shutdown()
"""


def test_torch_job_on_the_mpi_backend():
    check_build_has_mpi()
    python = os.environ.get("RONDE_TEST_PYTHON", "")
    if not python:
        pytest.skip("no Python with ronde installed (RONDE_TEST_PYTHON)")
    env = plain_env()
    env["RONDE_CPU_OPERATIONS"] = "mpi"
    result = subprocess.run(mpirun_command(2) + [python, "-c", TORCH_JOB], capture_output=True,
                            text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("torch job on the mpi backend") == 2, result.stdout


def test_mpi_backend_outside_mpirun_is_a_clear_error():
    check_build_has_mpi()
    env = plain_env()
    env.update({"RONDE_CPU_OPERATIONS": "mpi", "RONDE_RANK": "0", "RONDE_SIZE": "1"})
    result = subprocess.run([demo(), "1", "1"], capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.returncode != 0
    assert "RONDE_CPU_OPERATIONS=mpi" in result.stderr and "mpirun" in result.stderr, result.stderr


def test_allreduce_under_srun():
    if shutil.which("srun") is None:
        pytest.skip("srun (Slurm) is not installed here")
    result = subprocess.run(["srun", "-n", "2", demo(), "2", "2"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
