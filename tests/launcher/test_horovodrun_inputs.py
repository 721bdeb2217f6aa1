"""horovodrun's inputs that `ronde run` must honour or refuse (issue 40): --config-file, the
log timestamp flags, bad host input, elastic bounds without an elastic job, output folders
that do not exist, misspelt settings."""
import os
import re

import pytest

from conftest import rank_lines, run

BAD_INPUT = [
    (["-np", "1", "-H", "", "touch", "{marker}"], "ronde run: -H '': empty host list"),
    (["-np", "1", "-H", "user@:2", "touch", "{marker}"],
     "ronde run: -H user@:2: 'user@' is not a valid host name"),
    (["-np", "1", "--hostfile", "{dir}/twice", "touch", "{marker}"],
     "twice:1: slots given twice ('localhost slots=2 slots=3')"),
    (["-np", "1", "--hostfile", "{dir}/nul", "touch", "{marker}"],
     "nul:2: the line 'local\\x00host slots=1' has a NUL byte"),
    (["-np", "1", "--min-np", "1", "touch", "{marker}"],
     "ronde run: --min-np bounds an elastic job: give --host-discovery-script too"),
    (["-np", "1", "--max-np", "2", "touch", "{marker}"],
     "ronde run: --max-np bounds an elastic job: give --host-discovery-script too"),
    (["-np", "1", "--timeline-filename", "{dir}/missing/timeline.json", "touch", "{marker}"],
     "RONDE_TIMELINE='{dir}/missing/timeline.json': the folder {dir}/missing does not exist"),
    (["-np", "1", "--autotune", "--autotune-log-file", "{dir}/missing/log.csv", "touch",
      "{marker}"],
     "RONDE_AUTOTUNE_LOG='{dir}/missing/log.csv': the folder {dir}/missing does not exist"),
    (["-np", "1", "-x", "HOROVOD_TIMELINE={dir}/missing/t.json", "touch", "{marker}"],
     "RONDE_TIMELINE='{dir}/missing/t.json': the folder {dir}/missing does not exist"),
]


def fill(text, tmp_path):
    return text.replace("{marker}", str(tmp_path / "started")).replace("{dir}", str(tmp_path))


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, message):
    (tmp_path / "twice").write_text("localhost slots=2 slots=3\n")
    (tmp_path / "nul").write_bytes(b"# hosts\nlocal\0host slots=1\n")
    result = run(["run"] + [fill(a, tmp_path) for a in args])
    assert result.returncode == 2, result.stderr
    assert fill(message, tmp_path) in result.stderr
    assert not (tmp_path / "started").exists()


def test_timeline_in_an_existing_folder_starts(tmp_path):
    result = run(["run", "-np", "1", "--timeline-filename", str(tmp_path / "t.json"), "true"])
    assert result.returncode == 0, result.stderr


def test_an_elastic_job_checks_the_workers_settings_before_it_starts(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    marker = tmp_path / "started"
    result = run(["run", "-np", "1", "--host-discovery-script", str(script), "touch",
                  str(marker)], env=dict(os.environ, RONDE_CYCLE_TIME="abc"))
    assert result.returncode == 2, result.stderr
    assert "RONDE_CYCLE_TIME='abc' is not a number of milliseconds >= 0" in result.stderr
    assert not marker.exists()


def test_a_misspelt_setting_is_named_with_the_nearest_real_one():
    env = dict(os.environ, RONDE_FUSION_THRESHOL="1", RONDE_MY_SCRIPTS_OWN="1")
    result = run(["run", "-np", "1", "-x", "RONDE_CYCLE_TIMES=2", "true"], env=env)
    assert result.returncode == 0, result.stderr
    assert ("ronde run: warning: RONDE_FUSION_THRESHOL is not a setting of ronde and is "
            "ignored; did you mean RONDE_FUSION_THRESHOLD?") in result.stderr
    assert "RONDE_CYCLE_TIMES is not a setting of ronde" in result.stderr
    assert "did you mean RONDE_CYCLE_TIME?" in result.stderr
    assert "RONDE_MY_SCRIPTS_OWN" not in result.stderr  # not close to any setting


STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] \[ronde rank 0\] DEBUG: ")


@pytest.mark.parametrize("flags, stamped", [
    ([], True),  # Horovod's default: the time on every line
    (["--log-with-timestamp"], True),
    (["--log-without-timestamp"], False),
    (["--log-hide-timestamp"], False),  # horovodrun's deprecated spelling
])
def test_the_workers_log_lines_have_the_time_unless_hidden(flags, stamped):
    demo = os.path.join(os.environ.get("RONDE_EXAMPLES_DIR", ""), "allreduce_demo")
    if not os.access(demo, os.X_OK):
        pytest.skip("examples/allreduce_demo is not built")
    result = run(["run", "-np", "2", "--log-level", "debug"] + flags + [demo, "1", "1"],
                 timeout=120)
    assert result.returncode == 0, result.stderr
    logged = rank_lines(result.stderr, "stderr")[0]
    assert logged, result.stderr
    assert all(bool(STAMP.match(line)) == stamped for line in logged), logged
    if not stamped:
        assert all(line.startswith("[ronde rank 0] DEBUG: ") for line in logged), logged


CONFIG = """\
# horovodrun --config-file, Horovod's schema
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 2.5
  hierarchical_allreduce: true
autotune:
  enabled: true
  warmup_samples: 1
timeline:
  filename: {dir}/timeline.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 30
library_options:
  gloo_timeout_seconds: 40
logging:
  level: debug
  with_timestamp: false
"""


def worker_env(result):
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in rank_lines(result.stdout)[0])


def test_a_config_file_sets_what_its_flags_set(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text(CONFIG.replace("{dir}", str(tmp_path)))
    env = worker_env(run(["run", "-np", "1", "--config-file", str(config), "sh", "-c",
                          "env | grep ^RONDE_"]))
    assert env["RONDE_CPU_OPERATIONS"] == "native"
    assert env["RONDE_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)
    assert env["RONDE_CYCLE_TIME"] == "2.5"
    assert env["RONDE_HIERARCHICAL_ALLREDUCE"] == "1"
    assert env["RONDE_AUTOTUNE"] == "1" and env["RONDE_AUTOTUNE_WARMUP_SAMPLES"] == "1"
    assert env["RONDE_TIMELINE"] == str(tmp_path / "timeline.json")
    assert env["RONDE_TIMELINE_MARK_CYCLES"] == "1"
    assert env["RONDE_STALL_CHECK_DISABLE"] == "1"
    assert env["RONDE_STALL_CHECK_TIME_SECONDS"] == "30"
    assert env["RONDE_TIMEOUT_SECONDS"] == "40"
    assert env["RONDE_LOG_LEVEL"] == "DEBUG" and env["RONDE_LOG_HIDE_TIME"] == "1"


def test_flags_on_the_command_line_win_over_the_config_file(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text(CONFIG.replace("{dir}", str(tmp_path)))
    env = worker_env(run(["run", "-np", "1", "--cycle-time-ms", "7", "--config-file",
                          str(config), "--stall-check", "--log-with-timestamp", "sh", "-c",
                          "env | grep ^RONDE_"]))
    assert env["RONDE_CYCLE_TIME"] == "7"
    assert env["RONDE_STALL_CHECK_DISABLE"] == "0"
    assert env["RONDE_LOG_HIDE_TIME"] == "0"
    assert env["RONDE_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)  # from the file still


@pytest.mark.parametrize("text, message", [
    ("library_options:\n  num_nccl_streams: 2\n",
     "horovod.yaml:2: library_options.num_nccl_streams: --num-nccl-streams: not supported by "
     "ronde: the NCCL backend runs one stream per communicator"),
    ("params:\n  torus_allreduce: true\n",
     "horovod.yaml:2: params.torus_allreduce: --torus-allreduce: not supported by ronde"),
    ("library_options:\n  mpi_threads_disable: true\n",
     "horovod.yaml:2: library_options.mpi_threads_disable: --mpi-threads-disable: not "
     "supported by ronde"),
    ("params:\n  cycle_time_ms: fast\n",
     "horovod.yaml:2: params.cycle_time_ms: expected a number, not the value 'fast'"),
    ("params:\n\n  fusion_threshold: 3\n", "horovod.yaml:3: unknown key 'params.fusion_threshold'"),
    ("params:\n  cycle_time_ms: -1\n",
     "horovod.yaml:2: params.cycle_time_ms: --cycle-time-ms: must be at least 0, not -1"),
    ("params: [1,\n", "horovod.yaml:2: malformed YAML"),
    ("timeline:\n  filename: {dir}/missing/t.json\n",
     "RONDE_TIMELINE='{dir}/missing/t.json': the folder {dir}/missing does not exist"),
])
def test_a_bad_config_file_is_refused_before_anything_starts(tmp_path, text, message):
    config = tmp_path / "horovod.yaml"
    config.write_text(fill(text, tmp_path))
    result = run(["run", "-np", "1", "--config-file", str(config), "touch",
                  str(tmp_path / "started")])
    assert result.returncode == 2, result.stderr
    assert fill(message, tmp_path) in result.stderr
    assert not (tmp_path / "started").exists()


def test_a_missing_config_file_is_refused(tmp_path):
    result = run(["run", "-np", "1", "--config-file", str(tmp_path / "none.yaml"), "true"])
    assert result.returncode == 2
    assert "--config-file %s: cannot read" % (tmp_path / "none.yaml") in result.stderr
