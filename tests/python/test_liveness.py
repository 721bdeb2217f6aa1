"""A stopped (SIGSTOP) rank reaches ronde.torch as PeerLostError, a HorovodInternalError, on
the other rank, naming the silent rank and its host: the runtime's liveness heartbeats, not
the 300 s collective timeout. Starts its own `ronde run -np 2` job (from rank 0 of the outer
job only; the other ranks pass at once)."""

import os
import subprocess
import sys
import textwrap

import pytest

import ronde.torch as hvd

WORKER = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    import ronde.torch as hvd

    hvd.init()
    pids = hvd.allgather(torch.tensor([os.getpid()], dtype=torch.int64))
    hvd.allreduce(torch.ones(4), name="warm")
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops, the heartbeat too
        sys.exit(3)  # never reached: rank 0 kills this process
    start = time.monotonic()
    try:
        hvd.allreduce(torch.ones(1 << 20), name="step")
        print("NOT LOST", flush=True)
    except hvd.HorovodInternalError as error:
        print("LOST %s after %.1f s: %s" % (type(error).__name__, time.monotonic() - start,
                                            error), flush=True)
    os.kill(int(pids[1]), signal.SIGKILL)
    hvd.shutdown()
""")


def launcher():
    """The `ronde` binary: RONDE_BIN, or the launcher that started this rank."""
    path = os.environ.get("RONDE_BIN")
    if path:
        return path
    parent = os.path.realpath("/proc/%d/exe" % os.getppid())
    return parent if os.path.basename(parent) == "ronde" else None


def test_stopped_rank_is_reported_as_peer_lost(tmp_path):
    if hvd.rank() != 0:
        return
    ronde = launcher()
    if ronde is None:
        pytest.skip("no ronde launcher found (set RONDE_BIN)")
    script = tmp_path / "stopped_peer.py"
    script.write_text(WORKER)
    # The inner job must not see the outer job's identity; the HOROVOD_ name is accepted.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RONDE_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_"))}
    env["HOROVOD_LIVENESS_TIMEOUT_SECONDS"] = "2"
    env["RONDE_TIMEOUT_SECONDS"] = "120"  # longer than this test may take: only liveness reports
    result = subprocess.run([ronde, "run", "-np", "2", sys.executable, str(script)], env=env,
                            capture_output=True, text=True, timeout=90)
    lost = [line for line in result.stdout.splitlines() if "LOST" in line]
    assert len(lost) == 1, result.stdout + result.stderr
    line = lost[0]
    assert "LOST PeerLostError" in line, line
    host = os.uname().nodename
    assert "rank 1 on host %s has not answered for" % host in line, line
    assert "stopped or wedged" in line, line
    assert "RONDE_LIVENESS_TIMEOUT_SECONDS is 2" in line, line  # the HOROVOD_ name was read
