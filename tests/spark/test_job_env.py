"""The identity variables a driver hands its ranks, and the nics lookup (no engine needed)."""

from ronde import _job_env
from ronde.spark._nics import address_of_interface


def test_placements_number_local_and_cross_ranks_like_the_launcher():
    # Hosts in rank order a, b, a, c: a has ranks 0 and 2, b rank 1, c rank 3.
    got = [(p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"])
           for p in _job_env.placements(["a", "b", "a", "c"])]
    # Cross communicator of local rank 0: hosts a, b, c (ranks 0, 1, 3); of local rank 1:
    # host a alone (rank 2).
    assert got == [(0, 2, 0, 3), (0, 1, 1, 3), (1, 2, 0, 1), (0, 1, 2, 3)]


def test_worker_env_has_ronde_and_horovod_names():
    placement = _job_env.placements(["h", "h"])[1]
    env = _job_env.worker_env(placement, "10.0.0.1:1234", "s3cret", {"RONDE_LOG_LEVEL": "info"})
    assert env["RONDE_RANK"] == env["HOROVOD_RANK"] == "1"
    assert env["RONDE_LOCAL_SIZE"] == env["HOROVOD_LOCAL_SIZE"] == "2"
    assert env["RONDE_STORE_ADDRESS"] == "10.0.0.1:1234" and env["RONDE_SECRET"] == "s3cret"
    assert env["RONDE_HOSTNAME"] == "h" and env["RONDE_LOG_LEVEL"] == "info"
    assert len(_job_env.make_secret()) == 64 and _job_env.make_secret() != _job_env.make_secret()


def test_nics_resolve_to_the_interface_address():
    assert address_of_interface("lo") == "127.0.0.1"
    assert address_of_interface("no-such-nic0") is None
