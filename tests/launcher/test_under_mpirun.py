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


def test_allreduce_under_srun():
    if shutil.which("srun") is None:
        pytest.skip("srun (Slurm) is not installed here")
    result = subprocess.run(["srun", "-n", "2", demo(), "2", "2"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
