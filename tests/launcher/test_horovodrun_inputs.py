"""horovodrun's inputs that `ronde run` must refuse or honour (issue 40): bad host input,
elastic bounds without an elastic job, output folders that do not exist, misspelt settings."""
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
