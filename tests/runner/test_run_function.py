"""ronde.run (Horovod's horovod.run): a function run on every rank of a real job started by
`ronde run`, its values returned in rank order; a rank's exception reaches the caller with its
rank and traceback; Horovod's arguments that ronde cannot honour are refused before anything
starts. Run by plain pytest (not under `ronde run`): the test is the job's driver."""

import os
import shutil

import pytest

import ronde
from ronde.runner import _launch_arguments


def collective_step(scale, offset=0):
    """One rank's part: init, an allreduce of its rank, shutdown. Module-level, so that the
    standard pickle can send it too."""
    import torch
    import ronde.torch as hvd
    hvd.init()
    try:
        total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
        return (hvd.rank(), hvd.size(), scale * total + offset)
    finally:
        hvd.shutdown()


def step_under_mpirun():
    """collective_step, with mpirun's rank and the variable --mpi-args passed."""
    return collective_step(1) + (os.environ.get("OMPI_COMM_WORLD_RANK"),
                                 os.environ.get("FOO"))


@pytest.mark.parametrize("num_proc", [1, 2, 3])
def test_values_come_back_in_rank_order(num_proc):
    values = ronde.run(collective_step, args=(10,), kwargs={"offset": 1}, num_proc=num_proc)
    expected_sum = sum(range(num_proc))
    assert values == [(r, num_proc, 10 * expected_sum + 1) for r in range(num_proc)]


def test_a_lambda_and_its_closure_travel():
    pytest.importorskip("cloudpickle")
    base = {"k": 7}
    values = ronde.run(lambda x: base["k"] * x + int(os.environ["RONDE_RANK"]), args=(3,),
                       num_proc=2)
    assert values == [21, 22]


def test_deprecated_np_still_works():
    with pytest.warns(DeprecationWarning, match="num_proc"):
        assert ronde.run(collective_step, args=(1,), np=2) == [(0, 2, 1), (1, 2, 1)]


def fails_on_rank_one():
    rank = int(os.environ["RONDE_RANK"])
    if rank == 1:
        raise KeyError("no such shard on rank one")
    return rank


def test_a_rank_that_raises_names_itself():
    with pytest.raises(RuntimeError) as info:
        ronde.run(fails_on_rank_one, num_proc=2)
    text = str(info.value)
    assert "rank 1" in text and "KeyError" in text and "no such shard on rank one" in text
    assert "fails_on_rank_one" in text  # the traceback


@pytest.mark.parametrize("arguments, error, match", [
    (dict(hosts="localhost:2", hostfile="/tmp/h"), ValueError, "hosts and hostfile"),
    (dict(use_gloo=True, use_mpi=True), ValueError, "use_gloo and use_mpi"),
    (dict(mpi_args="--bind-to none"), ValueError, "use_mpi"),
    (dict(min_num_proc=1), ValueError, "host_discovery_script"),
    (dict(num_proc=0), ValueError, "num_proc"),
    (dict(network_interfaces=["eth0", "eth1"]), ValueError, "one network interface"),
])
def test_what_ronde_cannot_honour_is_refused_before_starting(arguments, error, match):
    with pytest.raises(error, match=match):
        ronde.run(collective_step, args=(1,), **dict(dict(num_proc=2), **arguments))


def test_flags_follow_horovods_arguments():
    flags = _launch_arguments(
        num_proc=4, min_num_proc=2, max_num_proc=6, slots=2, reset_limit=3,
        cooldown_range=(1, 5), hosts=None, hostfile=None, host_discovery_script="/bin/hosts",
        start_timeout=20, ssh_port=2222, ssh_identity_file="/k", output_filename="/o",
        verbose=True, use_gloo=True, use_mpi=None, mpi_args=None, network_interfaces=["lo"])
    assert flags == ["-np", "4", "--host-discovery-script", "/bin/hosts", "--min-np", "2",
                     "--max-np", "6", "--slots-per-host", "2", "--reset-limit", "3",
                     "--blacklist-cooldown-range", "1.0", "5.0", "--start-timeout", "20.0",
                     "--ssh-port", "2222", "--ssh-identity-file", "/k", "--output-filename",
                     "/o", "--verbose", "--network-interface", "lo"]


def test_use_mpi_and_mpi_args_become_ronde_run_mpi():
    flags = _launch_arguments(
        num_proc=2, min_num_proc=None, max_num_proc=None, slots=None, reset_limit=None,
        cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=True, mpi_args="-x FOO=bar",
        network_interfaces=None)
    assert flags == ["-np", "2", "--mpi", "--mpi-args=-x FOO=bar"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_use_mpi_starts_the_ranks_through_mpirun():
    values = ronde.run(step_under_mpirun, num_proc=2, use_mpi=True, mpi_args="-x FOO=bar")
    assert values == [(0, 2, 1.0, "0", "bar"), (1, 2, 1.0, "1", "bar")]


def test_use_gloo_selects_the_native_backend():
    values = ronde.run(lambda: os.environ.get("RONDE_CPU_OPERATIONS"), num_proc=1,
                       use_gloo=True) if _has_cloudpickle() else ["native"]
    assert values == ["native"]


def _has_cloudpickle():
    try:
        import cloudpickle  # noqa: F401
        return True
    except ImportError:
        return False
