"""`ronde run` with local ranks only: real processes, started through the ronde binary."""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import pids_with, rank_lines, run, ronde_binary, unique_marker, wait_for

ENV_PROBE = ('echo "$RONDE_RANK $RONDE_SIZE $RONDE_LOCAL_RANK $RONDE_LOCAL_SIZE '
             '$RONDE_CROSS_RANK $RONDE_CROSS_SIZE $HOROVOD_RANK $HOROVOD_SIZE '
             '$HOROVOD_LOCAL_RANK $RONDE_HOSTNAME $RONDE_STORE_ADDRESS $RONDE_SECRET"')


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_each_rank_gets_its_identity(ranks):
    result = run(["run", "-np", str(ranks), "sh", "-c", ENV_PROBE])
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(lines) == list(range(ranks))
    secrets = set()
    for rank, (line,) in lines.items():
        fields = line.split()
        assert fields[:9] == [str(rank), str(ranks), str(rank), str(ranks), "0", "1",
                              str(rank), str(ranks), str(rank)]
        assert fields[9] == os.uname().nodename
        assert re.fullmatch(r"127\.0\.0\.1:\d+", fields[10])
        assert re.fullmatch(r"[0-9a-f]{64}", fields[11])
        secrets.add(fields[11])
    assert len(secrets) == 1
    # A fresh secret per job.
    again = rank_lines(run(["run", "-np", "1", "sh", "-c", ENV_PROBE]).stdout)
    assert again[0][0].split()[11] not in secrets


def test_store_is_served_while_the_job_runs():
    probe = ("exec python3 -c \"import os,socket; h,p=os.environ['RONDE_STORE_ADDRESS']"
             ".rsplit(':',1); socket.create_connection((h,int(p)),5); print('connected')\"")
    result = run(["run", "-np", "2", "sh", "-c", probe])
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == {0: ["connected"], 1: ["connected"]}


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_demo_meets_through_the_launchers_store(ranks):
    demo = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if not os.access(demo, os.X_OK):
        pytest.skip("examples/allreduce_demo is not built")
    result = run(["run", "-np", str(ranks), demo, "2", "2"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%d ranks" % ranks in rank_lines(result.stdout)[0][0]
    assert "result correct" in result.stdout


def test_output_is_prefixed_per_rank_and_stream():
    script = 'echo "out $RONDE_RANK"; echo "err $RONDE_RANK" >&2; echo second; printf partial'
    result = run(["run", "-np", "2", "sh", "-c", script])
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert rank_lines(result.stdout)[rank] == ["out %d" % rank, "second", "partial"]
        assert rank_lines(result.stderr, "stderr")[rank] == ["err %d" % rank]


def test_output_streams_live():
    # The first line must arrive while the worker still runs, not when it exits.
    process = subprocess.Popen([ronde_binary(), "run", "-np", "1", "sh", "-c",
                                "echo early; sleep 30"], stdout=subprocess.PIPE, text=True)
    try:
        start = time.monotonic()
        assert process.stdout.readline() == "[0]<stdout>:early\n"
        assert time.monotonic() - start < 10
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


def test_output_filename_writes_per_rank_files(tmp_path):
    result = run(["run", "-np", "12", "--output-filename", str(tmp_path / "logs"), "sh", "-c",
                  'echo "hello $RONDE_RANK"; echo oops >&2'])
    assert result.returncode == 0, result.stderr
    assert "<stdout>" not in result.stdout
    for rank in range(12):
        directory = tmp_path / "logs" / ("rank.%02d" % rank)
        assert (directory / "stdout").read_text() == "hello %d\n" % rank
        assert (directory / "stderr").read_text() == "oops\n"


def test_exit_code_of_a_failing_rank_is_the_launchers():
    result = run(["run", "-np", "3", "sh", "-c", 'test "$RONDE_RANK" = 1 && exit 7; exit 0'])
    assert result.returncode == 7
    assert "ronde run: rank 1 on host %s exited with code 7" % os.uname().nodename in result.stderr


def test_crashing_worker_stops_the_job_and_the_others_are_killed():
    marker = unique_marker()
    script = ('if [ "$RONDE_RANK" = 2 ]; then sleep 0.5; kill -SEGV $$; fi; '
              'sleep %s & sleep %s' % (marker, marker))
    start = time.monotonic()
    result = run(["run", "-np", "4", "sh", "-c", script], timeout=60)
    assert time.monotonic() - start < 20
    assert result.returncode == 128 + signal.SIGSEGV
    assert ("ronde run: rank 2 on host %s killed by signal 11 (Segmentation fault)"
            % os.uname().nodename in result.stderr)
    assert "stopping the other 3 ranks" in result.stderr
    assert wait_for(lambda: not pids_with(marker), 5), pids_with(marker)


def test_worker_ignoring_sigterm_is_killed_after_the_grace_period():
    marker = unique_marker()
    script = ('if [ "$RONDE_RANK" = 0 ]; then exit 4; fi; '
              'trap "" TERM; sleep %s' % marker)
    start = time.monotonic()
    result = run(["run", "-np", "2", "--grace-period", "1", "sh", "-c", script])
    assert result.returncode == 4
    assert time.monotonic() - start < 10
    assert wait_for(lambda: not pids_with(marker), 5)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_launcher_leaves_no_process_behind(sig):
    marker = unique_marker()
    process = subprocess.Popen(
        [ronde_binary(), "run", "-np", "3", "sh", "-c",
         "sleep %s & sleep %s; echo never" % (marker, marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # 3 ranks x (sh + 2 sleeps), plus the launcher's own command line.
        assert wait_for(lambda: len(pids_with(marker)) >= 10, 10), pids_with(marker)
        process.send_signal(sig)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + sig
    assert "received %s, stopping 3 ranks" % signal.Signals(sig).name in err
    assert "never" not in out
    assert wait_for(lambda: not pids_with(marker), 5), pids_with(marker)


def test_killed_launcher_takes_its_workers_along():
    marker = unique_marker()
    process = subprocess.Popen([ronde_binary(), "run", "-np", "2", "sleep", marker],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: len(pids_with(marker)) >= 3, 10)
    process.kill()
    process.wait(timeout=10)
    assert wait_for(lambda: not pids_with(marker), 5), pids_with(marker)


def test_tuning_flags_become_settings():
    result = run(["run", "-np", "1", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
                  "--cache-capacity", "0", "--timeline-filename", "/tmp/t.json",
                  "--timeline-mark-cycles", "--stall-check-warning-time-seconds", "30",
                  "--stall-check-shutdown-time-seconds", "120", "--no-stall-check",
                  "--log-level", "debug", "--start-timeout", "45", "--disable-cache",
                  "--liveness-timeout-seconds", "4.5", "sh", "-c", "env | grep ^RONDE_ | sort"])
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in rank_lines(result.stdout)[0])
    assert env["RONDE_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)
    assert env["RONDE_CYCLE_TIME"] == "2.5"
    assert env["RONDE_CACHE_CAPACITY"] == "0"
    assert env["RONDE_TIMELINE"] == "/tmp/t.json"
    assert env["RONDE_TIMELINE_MARK_CYCLES"] == "1"
    assert env["RONDE_STALL_CHECK_TIME_SECONDS"] == "30"
    assert env["RONDE_STALL_SHUTDOWN_TIME_SECONDS"] == "120"
    assert env["RONDE_STALL_CHECK_DISABLE"] == "1"
    assert env["RONDE_LOG_LEVEL"] == "DEBUG"
    assert env["RONDE_START_TIMEOUT"] == "45"
    assert env["RONDE_LIVENESS_TIMEOUT_SECONDS"] == "4.5"
    assert "RONDE_INTERFACE" not in env


def test_horovodruns_autotune_timeline_and_stall_flags_become_settings():
    result = run(["run", "-np", "1", "--autotune", "--autotune-warmup-samples", "0",
                  "--autotune-steps-per-sample", "7", "--autotune-bayes-opt-max-samples", "9",
                  "--autotune-gaussian-process-noise", "0.25", "--no-timeline-mark-cycles",
                  "--stall-check", "sh", "-c", "env | grep ^RONDE_ | sort"])
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in rank_lines(result.stdout)[0])
    assert env["RONDE_AUTOTUNE"] == "1"
    assert env["RONDE_AUTOTUNE_WARMUP_SAMPLES"] == "0"
    assert env["RONDE_AUTOTUNE_STEPS_PER_SAMPLE"] == "7"
    assert env["RONDE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"] == "9"
    assert env["RONDE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] == "0.25"
    assert env["RONDE_TIMELINE_MARK_CYCLES"] == "0"
    assert env["RONDE_STALL_CHECK_DISABLE"] == "0"
    off = run(["run", "-np", "1", "--no-autotune", "sh", "-c", "env | grep ^RONDE_AUTOTUNE="])
    assert rank_lines(off.stdout)[0] == ["RONDE_AUTOTUNE=0"]


@pytest.mark.parametrize("flags, message", [
    (["--autotune-steps-per-sample", "0"], "autotune-steps-per-sample"),
    (["--autotune-gaussian-process-noise", "0"], "autotune-gaussian-process-noise"),
    (["--autotune-warmup-samples", "-1"], "autotune-warmup-samples"),
])
def test_bad_autotune_values_are_refused_by_name(flags, message):
    result = run(["run", "-np", "1"] + flags + ["true"])
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_min_and_max_num_proc_are_the_elastic_bounds(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    result = run(["run", "-np", "1", "--min-num-proc", "1", "--max-num-proc", "1",
                  "--host-discovery-script", str(script), "sh", "-c", "echo $RONDE_ELASTIC"])
    assert result.returncode == 0, result.stderr
    # --max-num-proc 1 held the world to one worker though the host offers two slots.
    assert list(rank_lines(result.stdout)) == [0]


def test_env_flag_passes_variables():
    result = run(["run", "-np", "2", "-x", "FROM_HERE", "-x", "GIVEN=a b", "--env", "OTHER=1",
                  "sh", "-c", 'echo "$FROM_HERE|$GIVEN|$OTHER"'],
                 env=dict(os.environ, FROM_HERE="here"))
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == {0: ["here|a b|1"], 1: ["here|a b|1"]}


def test_network_interface_sets_interface_and_store_address():
    result = run(["run", "-np", "1", "--network-interface", "lo", "sh", "-c",
                  'echo "$RONDE_INTERFACE $RONDE_STORE_ADDRESS"'])
    assert result.returncode == 0, result.stderr
    interface, address = rank_lines(result.stdout)[0][0].split()
    assert interface == "lo" and address.startswith("127.0.0.1:")


def test_command_options_after_the_command_are_the_commands():
    result = run(["run", "-np", "1", "sh", "-c", 'echo "$0 $1"', "-np", "--verbose"])
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == {0: ["-np --verbose"]}


BAD_INPUT = [
    (["-np", "2", "-H", "a:x", "touch", "{marker}"],
     "ronde run: -H a:x: slot count 'x' is not a positive integer"),
    (["-np", "2", "-H", "a:2,,b:1", "touch", "{marker}"], "empty entry (stray comma?)"),
    (["-np", "5", "-H", "localhost:2,127.0.0.1:2", "touch", "{marker}"],
     "ronde run: -np 5: more ranks than slots (4 slots on 2 hosts)"),
    (["-np", "3", "touch", "{marker}"], None),  # control: this one does start
    (["-np", "0", "touch", "{marker}"], "-np 0: the number of ranks must be positive"),
    (["touch", "{marker}"], "-np is required"),
    (["-np", "2", "--no-such-flag", "touch", "{marker}"], "--no-such-flag"),
    (["-np", "2", "--log-level", "LOUD", "touch", "{marker}"], "--log-level"),
    (["-np", "2"], "no command given"),
    (["-np", "2", "no-such-command-anywhere"],
     "no-such-command-anywhere: command not found on PATH"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts", "touch", "{marker}"],
     "--hostfile /nonexistent/hosts: cannot read"),
    (["-np", "2", "-H", "localhost:2", "--hostfile", "/etc/hosts", "touch", "{marker}"],
     "give -H or --hostfile, not both"),
    (["-np", "1", "-x", "RONDE_TEST_SURELY_UNSET", "touch", "{marker}"],
     "-x RONDE_TEST_SURELY_UNSET: RONDE_TEST_SURELY_UNSET is not set here"),
    # Settings are checked by the launcher, not 1-3 s later inside every worker.
    (["-np", "2", "-x", "RONDE_TCP_CHUNK_BYTES=0", "touch", "{marker}"],
     "ronde run: RONDE_TCP_CHUNK_BYTES='0' is not an integer number of bytes >= 4096"),
    (["-np", "2", "-x", "HOROVOD_FUSION_THRESHOLD=lots", "touch", "{marker}"],
     "ronde run: HOROVOD_FUSION_THRESHOLD='lots' is not an integer number of bytes"),
    (["-np", "2", "-x", "RONDE_TRANSPORT=pigeon", "touch", "{marker}"],
     "RONDE_TRANSPORT='pigeon' is not a transport"),
    (["-np", "2", "--cycle-time-ms", "-1", "touch", "{marker}"],
     "--cycle-time-ms: must be at least 0, not -1"),
    (["-np", "2", "--start-timeout", "0", "touch", "{marker}"],
     "--start-timeout: must be more than 0, not 0"),
    (["-np", "2", "--bind-to", "elbow", "touch", "{marker}"], "--bind-to"),
    # Numbers that would not fit the integer they become: refused, not wrapped around
    # (--fusion-threshold-mb 1e30 set RONDE_FUSION_THRESHOLD='-9223372036854775808').
    (["-np", "2", "--fusion-threshold-mb", "1e30", "touch", "{marker}"],
     "--fusion-threshold-mb: must be at most 8796093022207, not 1e30"),
    (["-np", "2", "--grace-period", "1e30", "touch", "{marker}"],
     "--grace-period: must be at most 1000000000, not 1e30"),
    (["-np", "2", "-x", "RONDE_START_TIMEOUT=1e30", "touch", "{marker}"],
     "ronde run: RONDE_START_TIMEOUT='1e30' is out of range: expected a number of seconds >= 0,"
     " at most 1e+09"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_is_reported_before_anything_starts(tmp_path, args, message):
    marker = tmp_path / "started"
    result = run(["run"] + [a.replace("{marker}", str(marker)) for a in args])
    if message is None:
        assert result.returncode == 0 and marker.exists()
        return
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "e+308" not in result.stderr  # ranges say their bound, not DBL_MAX
    assert not marker.exists()


def test_settings_in_the_launchers_environment_are_checked_too(tmp_path):
    marker = tmp_path / "started"
    env = dict(os.environ, RONDE_SHM_CHUNK_BYTES="12x")
    result = run(["run", "-np", "2", "touch", str(marker)], env=env)
    assert result.returncode == 2
    assert "RONDE_SHM_CHUNK_BYTES='12x'" in result.stderr
    assert not marker.exists()


def cpus_allowed(text):
    """{rank: set of CPUs} from workers that printed their Cpus_allowed_list."""
    found = {}
    for rank, lines in rank_lines(text).items():
        listed = lines[0].split(":", 1)[1].strip()
        cpus = set()
        for part in listed.split(","):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
        found[rank] = cpus
    return found


def usable_cpus():
    return sorted(os.sched_getaffinity(0))


def usable_cores():
    """Distinct (socket, core) pairs among the usable CPUs: hyperthreads share a core."""
    cores = set()
    for cpu in usable_cpus():
        topology = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
        try:
            with open(topology + "physical_package_id") as a, open(topology + "core_id") as b:
                cores.add((a.read().strip(), b.read().strip()))
        except OSError:
            cores.add(("0", str(-cpu)))
    return len(cores)


PROBE_BINDING = ["grep", "Cpus_allowed_list", "/proc/self/status"]


def test_ranks_that_fit_get_a_core_each_by_default():
    ranks = min(2, usable_cores())
    result = run(["run", "-np", str(ranks), "--report-bindings"] + PROBE_BINDING)
    assert result.returncode == 0, result.stderr
    bound = cpus_allowed(result.stdout)
    if ranks > 1:
        assert all(len(bound[r]) >= 1 for r in range(ranks))
        assert not (bound[0] & bound[1]), bound  # distinct cores
    for r in range(ranks):
        assert "rank %d on %s: bound to CPUs" % (r, os.uname().nodename) in result.stderr


def test_oversubscribed_ranks_float_and_bind_to_none_binds_nothing():
    cpus = set(usable_cpus())
    over = usable_cores() + 1
    result = run(["run", "-np", str(over), "--report-bindings"] + PROBE_BINDING)
    assert result.returncode == 0, result.stderr
    assert all(found == cpus for found in cpus_allowed(result.stdout).values())
    assert "not bound" in result.stderr
    result = run(["run", "-np", "1", "--bind-to", "none"] + PROBE_BINDING)
    assert cpus_allowed(result.stdout)[0] == cpus


def test_bind_to_core_and_socket_when_asked():
    cpus = set(usable_cpus())
    result = run(["run", "-np", str(usable_cores() + 1), "--bind-to", "core"] + PROBE_BINDING)
    assert result.returncode == 0, result.stderr
    bound = cpus_allowed(result.stdout)
    assert all(found < cpus or usable_cores() == 1 for found in bound.values())
    assert "some ranks share a core" in result.stderr
    result = run(["run", "-np", "1", "--bind-to", "socket"] + PROBE_BINDING)
    assert result.returncode == 0, result.stderr
    assert cpus_allowed(result.stdout)[0] <= cpus


def test_hostfile_places_ranks(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two local names\nlocalhost slots=2\n127.0.0.1 slots=1\n")
    result = run(["run", "-np", "3", "-hostfile", str(hostfile), "sh", "-c",
                  'echo "$RONDE_LOCAL_RANK $RONDE_LOCAL_SIZE $RONDE_CROSS_RANK $RONDE_CROSS_SIZE"'])
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == {0: ["0 2 0 2"], 1: ["1 2 0 1"], 2: ["0 1 1 2"]}


def test_check_build_lists_components():
    result = run(["check-build"], timeout=30)
    assert result.returncode == 0, result.stderr
    for word in ("ronde 0.", "Transports", "shm", "tcp", "Backends", "MPI", "Frontends",
                 "Python frontends", "Python 3."):
        assert word in result.stdout


def test_check_build_reports_the_frameworks_of_a_python():
    python = os.environ.get("RONDE_TEST_PYTHON")
    if not python:
        pytest.skip("RONDE_TEST_PYTHON is not set")
    result = run(["check-build", "--python", python], timeout=30)
    assert result.returncode == 0, result.stderr
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    assert "[X] PyTorch (torch %s, ronde frontend)" % version in result.stdout, result.stdout
    assert "[X] Python 3." in result.stdout and python in result.stdout


def test_check_build_settings():
    result = run(["check-build", "--settings"], timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Settings" in result.stdout


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_run_prints_its_version_as_horovodrun_does(flag):
    result = run(["run", flag])
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"ronde \d+\.\d+\.\d+\n", result.stdout)


@pytest.mark.parametrize("flags", [["-cb"], ["--check-build"], ["-np", "2", "-cb"]])
def test_run_check_build_prints_what_check_build_prints(flags):
    alone = run(["check-build"])
    result = run(["run"] + flags)
    assert result.returncode == 0, result.stderr
    # Horovod's layout: [X] / [ ] lines; the same content as `ronde check-build`.
    assert "[X] native" in result.stdout and "[X] shm" in result.stdout
    assert result.stdout == alone.stdout


def test_gloo_selects_the_native_backend_and_its_timeout_is_the_collectives():
    result = run(["run", "-np", "1", "--gloo", "--gloo-timeout-seconds", "12", "sh", "-c",
                  "echo $RONDE_CPU_OPERATIONS $RONDE_TIMEOUT_SECONDS"])
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout)[0] == ["native 12"]


@pytest.mark.parametrize("flags, reason", [
    (["--jsrun"], "LSF"),
    (["--torus-allreduce"], "hierarchical-allreduce"),
    (["--no-torus-allreduce"], "torus"),
    (["--thread-affinity", "1"], "pinned"),
    (["--num-nccl-streams", "2"], "one stream"),
    (["--mpi-threads-disable"], "MPI_THREAD_MULTIPLE"),
])
def test_horovodrun_flags_ronde_cannot_honour_are_refused_with_the_reason(flags, reason):
    result = run(["run", "-np", "1"] + flags + ["true"])
    assert result.returncode == 2
    assert "%s: not supported by ronde" % flags[0] in result.stderr and reason in result.stderr
