"""HorovodInternalError is what Horovod raises when a collective fails because the job did (a
peer lost, the communicator aborted, a wait timed out): an elastic script catches it to restore
its state and re-form. A script's own bad argument or a disagreement between ranks must pass
through such an ``except`` clause: restoring would only repeat it. Before, HorovodInternalError
was ronde's base RondeError and caught them all.

The lost peer is a job of its own (`ronde run -np 2`, started from rank 0 of the outer job
only): its rank 1 exits and rank 0's next collective must land in ``except
HorovodInternalError``."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import ronde.torch as hvd
from ronde import _core


def test_horovod_internal_error_is_a_runtime_error_of_its_own():
    # Horovod's class derives from RuntimeError; ronde's runtime failures derive from it.
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert hvd.HorovodInternalError is not hvd.RondeError
    for lost in (_core.PeerLostError, _core.AbortedError, _core.TimeoutError):
        assert issubclass(lost, hvd.HorovodInternalError), lost
    # As Horovod's synchronize wraps every failed collective, a disagreement is one too.
    assert issubclass(_core.MismatchError, hvd.HorovodInternalError)
    for own in (_core.InvalidArgumentError, _core.ConfigError):
        assert not issubclass(own, hvd.HorovodInternalError), own
    assert hvd.elastic.HorovodInternalError is hvd.HorovodInternalError


def _escapes_internal_error_clause(call):
    """The error `call` raises, having passed an ``except HorovodInternalError`` clause."""
    try:
        try:
            call()
        except hvd.HorovodInternalError:
            pytest.fail("an error of the script was caught as HorovodInternalError")
    except Exception as error:  # noqa: BLE001 - what passed the clause is the result
        return error
    pytest.fail("no error was raised")


def test_invalid_argument_passes_except_horovod_internal_error():
    error = _escapes_internal_error_clause(
        lambda: hvd.allreduce(torch.empty(3, device="meta"), name="internal.meta"))
    assert isinstance(error, ValueError), error
    error = _escapes_internal_error_clause(
        lambda: hvd.broadcast(torch.ones(2), root_rank=hvd.size() + 3, name="internal.root"))
    assert isinstance(error, ValueError), error
    # The runtime is still usable afterwards.
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


def test_mismatch_is_a_horovod_internal_error_as_in_horovod():
    # Horovod's synchronize raises HorovodInternalError for any failed collective, a
    # disagreement between ranks included.
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(torch.ones(hvd.rank() + 2), name="internal.mismatch")
    assert isinstance(info.value, hvd.MismatchError), info.value
    assert "internal.mismatch" in str(info.value)
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


WORKER = textwrap.dedent("""
    import os, sys
    import torch
    import ronde.torch as hvd

    hvd.init()
    hvd.allreduce(torch.ones(4), name="warm")
    if hvd.rank() == 1:
        os._exit(0)  # gone without a word: its connections close
    try:
        hvd.allreduce(torch.ones(1 << 16), name="step")
        print("NOT LOST", flush=True)
    except hvd.HorovodInternalError as error:
        print("LOST %s: %s" % (type(error).__name__, error), flush=True)
    hvd.shutdown()
""")


def _launcher():
    """The `ronde` binary: RONDE_BIN, or the launcher that started this rank."""
    path = os.environ.get("RONDE_BIN")
    if path:
        return path
    parent = os.path.realpath("/proc/%d/exe" % os.getppid())
    return parent if os.path.basename(parent) == "ronde" else None


def test_lost_peer_is_caught_by_except_horovod_internal_error(tmp_path):
    if hvd.rank() != 0:
        return
    ronde = _launcher()
    if ronde is None:
        pytest.skip("no ronde launcher found (set RONDE_BIN)")
    script = tmp_path / "lost_peer.py"
    script.write_text(WORKER)
    # The inner job must not see the outer job's identity.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RONDE_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_"))}
    env["RONDE_LIVENESS_TIMEOUT_SECONDS"] = "2"
    result = subprocess.run([ronde, "run", "-np", "2", sys.executable, str(script)], env=env,
                            capture_output=True, text=True, timeout=90)
    lost = [line for line in result.stdout.splitlines() if "LOST" in line]
    assert len(lost) == 1, result.stdout + result.stderr
    assert lost[0].startswith(("[0]<stdout>:LOST PeerLostError", "[0]<stdout>:LOST AbortedError",
                               "LOST PeerLostError", "LOST AbortedError")), lost[0]
