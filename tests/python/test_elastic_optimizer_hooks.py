"""A DistributedOptimizer built while an elastic world has one rank still reduces its gradients
once the world grows: as Horovod does under HOROVOD_ELASTIC=1, it registers its gradient
hooks even at size 1. Before, it skipped them at size 1, so after the growth it reduced
nothing while the newcomer's optimizer (built at size 2) waited for it.

An elastic job of its own (`ronde run --host-discovery-script`, started from rank 0 of the
outer job only): one worker trains alone, a second host is discovered, and both ranks must
then see the average of their gradients. Each rank's gradient is rank + 1 (the input of a
bias-free linear layer), so the average over two ranks is 1.5."""

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import ronde.torch as hvd

WORKER = textwrap.dedent("""
    import time
    import torch
    import ronde.torch as hvd

    hvd.init()
    model = torch.nn.Linear(2, 1, bias=False)
    # Built once, in the world this worker first joins (one rank for the first worker).
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, steps_at_two=0)

    @hvd.elastic.run
    def train(state):
        while state.steps_at_two < 3:
            optimizer.zero_grad()
            model(torch.full((1, 2), float(hvd.rank() + 1))).sum().backward()
            optimizer.step()
            print("elastic: step size=%d rank=%d grad=%g"
                  % (hvd.size(), hvd.rank(), model.weight.grad[0, 0].item()), flush=True)
            if hvd.size() == 2:
                state.steps_at_two += 1
            state.commit()
            time.sleep(0.05)

    train(state)
""")


def _launcher():
    """The `ronde` binary: RONDE_BIN, or the launcher that started this rank."""
    path = os.environ.get("RONDE_BIN")
    if path:
        return path
    parent = os.path.realpath("/proc/%d/exe" % os.getppid())
    return parent if os.path.basename(parent) == "ronde" else None


def _write_hosts(path, hosts):
    with open(path + ".tmp", "w") as f:
        f.write("".join(h + "\n" for h in hosts))
    os.replace(path + ".tmp", path)


def test_optimizer_built_in_a_one_rank_elastic_world_reduces_after_growth():
    if hvd.rank() != 0:
        return
    ronde = _launcher()
    if ronde is None:
        pytest.skip("no ronde launcher found (set RONDE_BIN)")
    with tempfile.TemporaryDirectory() as directory:
        script = os.path.join(directory, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        hosts = os.path.join(directory, "hosts")
        _write_hosts(hosts, ["127.0.0.1:1"])
        discover = os.path.join(directory, "discover.sh")
        with open(discover, "w") as f:
            f.write("#!/bin/sh\ncat %s\n" % hosts)
        os.chmod(discover, 0o755)
        # The inner job must not see the outer job's identity.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RONDE_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_"))}
        env["RONDE_TIMEOUT_SECONDS"] = "30"
        job = subprocess.Popen(
            [ronde, "run", "-np", "1", "--min-np", "1", "--max-np", "2",
             "--host-discovery-script", discover, "--elastic-timeout", "60",
             sys.executable, script], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not any("size=1" in line for line in lines):
                assert time.monotonic() < deadline and job.poll() is None, "".join(lines)
                time.sleep(0.05)
            _write_hosts(hosts, ["127.0.0.1:1", "127.0.0.2:1"])
            code = job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            code = None
        reader.join(timeout=5)
    output = "".join(lines)
    at_two = [line for line in lines if "elastic: step size=2" in line]
    assert code == 0, output
    assert at_two, output
    for line in at_two:
        assert line.rstrip().endswith("grad=1.5"), output
    assert {line.split("rank=")[1].split()[0] for line in at_two} == {"0", "1"}, output
