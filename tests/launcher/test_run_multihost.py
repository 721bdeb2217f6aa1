"""`ronde run` across hosts over ssh, for real: hosts are network namespaces with sshd.

Skipped, saying why, where namespaces cannot be made (not root, no sshd, no ip tool).
"""
import os
import signal
import subprocess
import time

import pytest

from conftest import pids_with, rank_lines, ronde_binary, run, unique_marker, wait_for
from netns_hosts import CannotMakeHosts, NamespaceHosts


@pytest.fixture(scope="module")
def hosts():
    try:
        made = NamespaceHosts(3, with_sshd=[0, 1])  # the third host has no sshd
    except CannotMakeHosts as why:
        pytest.skip("multi-host tests skipped: cannot make namespace hosts: %s" % why)
    yield made
    made.close()


def two_by_two(hosts):
    return ["-np", "4", "-H", "%s:2,%s:2" % (hosts.addresses[0], hosts.addresses[1])]


def ronde_run(hosts, args, **kwargs):
    return run(["run"] + hosts.ssh_args() + args, **kwargs)


def test_two_hosts_two_ranks_each(hosts):
    probe = ('echo "$RONDE_RANK $RONDE_SIZE $RONDE_LOCAL_RANK $RONDE_LOCAL_SIZE '
             '$RONDE_CROSS_RANK $RONDE_CROSS_SIZE $HOROVOD_RANK $RONDE_HOSTNAME $(hostname) '
             '$RONDE_STORE_ADDRESS $RONDE_SECRET $PWD"; echo "err $RONDE_RANK" >&2')
    result = ronde_run(hosts, two_by_two(hosts) + ["sh", "-c", probe])
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(lines) == [0, 1, 2, 3]
    secrets = set()
    for rank, (line,) in lines.items():
        fields = line.split()
        host = rank // 2
        assert fields[:7] == [str(rank), "4", str(rank % 2), "2", str(host), "2", str(rank)]
        assert fields[7] == hosts.addresses[host]
        assert fields[8] == hosts.hostnames[host]  # really ran on that host
        assert fields[9].startswith("10.231.%d.1:" % hosts.subnet)
        assert len(fields[10]) == 64
        assert fields[11] == os.getcwd()
        secrets.add(fields[10])
    assert len(secrets) == 1
    assert rank_lines(result.stderr, "stderr") == {r: ["err %d" % r] for r in range(4)}


def test_secret_stays_off_command_lines(hosts):
    # While the job runs, no process on the machine shows the secret in its arguments.
    marker = unique_marker()
    process = subprocess.Popen(
        [ronde_binary(), "run"] + hosts.ssh_args() + two_by_two(hosts) +
        ["sh", "-c", 'echo "$RONDE_SECRET"; exec sleep %s' % marker],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(pids_with("sleep " + marker)) >= 4, 20)
        secret = None
        line = process.stdout.readline()
        secret = line.split(":", 1)[1].strip()
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert len(secret) == 64 and secret not in ps
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_store_is_reachable_from_every_host(hosts):
    probe = ("exec python3 -c \"import os,socket; h,p=os.environ['RONDE_STORE_ADDRESS']"
             ".rsplit(':',1); socket.create_connection((h,int(p)),5); print('connected')\"")
    result = ronde_run(hosts, two_by_two(hosts) + ["sh", "-c", probe])
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == {r: ["connected"] for r in range(4)}


def test_allreduce_over_ssh(hosts):
    demo = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if not os.access(demo, os.X_OK):
        pytest.skip("examples/allreduce_demo is not built yet")
    result = ronde_run(hosts, two_by_two(hosts) + [demo, "4", "3"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 ranks" in result.stdout and "result correct" in result.stdout


def test_mpi_starts_the_same_ranks_through_mpirun(hosts):
    # ronde run --mpi: mpirun's ssh reaches the hosts; the ranks meet at the launcher's store.
    probe = 'echo "$RONDE_RANK $OMPI_COMM_WORLD_RANK $RONDE_LOCAL_RANK $(hostname)"'
    result = ronde_run(hosts, ["--mpi"] + two_by_two(hosts) + ["sh", "-c", probe], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        if "]<stdout>:" in line:
            fields = line.split(":", 1)[1].split()
            lines[int(fields[0])] = fields
    assert lines == {r: [str(r), str(r), str(r % 2), hosts.hostnames[r // 2]] for r in range(4)}
    demo = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if os.access(demo, os.X_OK):
        result = ronde_run(hosts, ["--mpi"] + two_by_two(hosts) + [demo, "4", "3"], timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "4 ranks" in result.stdout and "result correct" in result.stdout


def test_local_and_remote_ranks_together(hosts):
    result = ronde_run(hosts, ["-np", "2", "-H", "localhost:1,%s:1" % hosts.addresses[0],
                               "sh", "-c", 'echo "$RONDE_HOSTNAME $RONDE_STORE_ADDRESS"'])
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    local_host, local_store = lines[0][0].split()
    remote_host, remote_store = lines[1][0].split()
    assert local_host == os.uname().nodename
    assert remote_host == hosts.addresses[0]
    # Both meet at the one store, at the address the remote host can reach.
    assert local_store == remote_store
    assert remote_store.startswith("10.231.%d.1:" % hosts.subnet)


def test_remote_failure_stops_every_host(hosts):
    marker = unique_marker()
    script = ('if [ "$RONDE_RANK" = 3 ]; then sleep 1; exit 5; fi; '
              'sleep %s & sleep %s' % (marker, marker))
    start = time.monotonic()
    result = ronde_run(hosts, two_by_two(hosts) + ["sh", "-c", script], timeout=60)
    assert time.monotonic() - start < 30
    assert result.returncode == 5
    assert ("ronde run: rank 3 on host %s exited with code 5" % hosts.addresses[1]
            in result.stderr)
    assert "stopping the other 3 ranks" in result.stderr
    # The namespaces share this machine's process table: pgrep sees the remote workers too.
    assert wait_for(lambda: not pids_with(marker), 10), pids_with(marker)


def test_remote_worker_killed_by_signal_is_reported(hosts):
    result = ronde_run(hosts, ["-np", "1", "-H", "%s:1" % hosts.addresses[0], "sh", "-c",
                               "kill -KILL $$"])
    assert result.returncode == 137
    assert ("rank 0 on host %s killed by signal 9 (Killed)" % hosts.addresses[0]
            in result.stderr)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_stopping_the_launcher_stops_remote_workers(hosts, sig):
    marker = unique_marker()
    process = subprocess.Popen(
        [ronde_binary(), "run"] + hosts.ssh_args() + two_by_two(hosts) +
        ["sh", "-c", "sleep %s & sleep %s" % (marker, marker)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # 4 ranks x (sh + 2 sleeps) on the hosts.
        assert wait_for(lambda: len([p for p in pids_with("sleep " + marker)]) >= 8, 20)
        process.send_signal(sig)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode in (128 + sig, -sig)
    assert wait_for(lambda: not pids_with(marker), 10), pids_with(marker)


def test_unreachable_host_is_reported_before_anything_starts(hosts, tmp_path):
    marker = tmp_path / "started"
    result = ronde_run(hosts, ["--start-timeout", "5", "-np", "2", "-H",
                               "%s:1,%s:1" % (hosts.addresses[0], hosts.addresses[2]),
                               "touch", str(marker)])
    assert result.returncode == 1
    assert "cannot reach host %s over ssh: " % hosts.addresses[2] in result.stderr
    assert "Connection refused" in result.stderr
    assert hosts.addresses[0] not in result.stderr
    assert not marker.exists()
