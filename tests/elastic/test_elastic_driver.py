"""The elastic driver's policies with plain shell workers (no training): discovery faults,
--reset-limit, --max-np, --min-np with --elastic-timeout, and bad command lines."""
import os
import re
import signal
import subprocess
import time

from elastic_job import ElasticJob, HostsFile, ronde_binary

# Prints its pid, then lives for SECONDS unless killed.
def sleeper(seconds):
    return ["sh", "-c", "echo pid=$$ worker=$RONDE_ELASTIC_WORKER_ID host=$RONDE_HOSTNAME; "
                        "exec sleep %s" % seconds]


def worker_pids(job):
    pids = {}
    for _, worker, _, text in list(job.events):
        match = re.match(r"pid=(\d+) ", text)
        if match:
            pids[worker] = int(match.group(1))
    return pids


def generations(job):
    return re.findall(r"generation (\d+): (\d+) worker", job.launcher_text())


def run_launcher(args, timeout=30):
    return subprocess.run([ronde_binary(), "run"] + args, capture_output=True, text=True,
                          timeout=timeout)


def test_missing_or_not_executable_discovery_script_is_bad_input(tmp_path):
    missing = str(tmp_path / "nowhere.sh")
    result = run_launcher(["-np", "1", "--host-discovery-script", missing, "true"])
    assert result.returncode == 2, result.stderr
    assert "host discovery script %s" % missing in result.stderr
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\necho localhost\n")
    result = run_launcher(["-np", "1", "--host-discovery-script", str(plain), "true"])
    assert result.returncode == 2, result.stderr
    assert "%s is not an executable file" % plain in result.stderr


def test_discovery_faults_keep_the_current_hosts(tmp_path):
    # Run 1 answers; then garbage, a failure and a hang, one after the other; then it answers.
    script = tmp_path / "flaky.sh"
    script.write_text("""#!/bin/sh
n=$(cat %(d)s/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > %(d)s/count
case $n in
  1) echo 127.0.0.1:1; echo 127.0.0.2:1 ;;
  2) echo 127.0.0.1:1; echo 'not a host!' ;;
  3) echo 127.0.0.3:abc ;;
  4) echo broken >&2; exit 3 ;;
  5) exec sleep 30 ;;
  *) echo 127.0.0.1:1; echo 127.0.0.2:1 ;;
esac
""" % {"d": tmp_path})
    script.chmod(0o755)
    job = ElasticJob(["-np", "2", "--host-discovery-script", str(script),
                      "--host-discovery-timeout", "1"], command=sleeper(7))
    assert job.finish(60) == 0, job.output()
    text = job.launcher_text()
    assert "host discovery script %s line 2: 'not a host!' is not 'host' or 'host:slots'" % script \
        in text, text
    assert "line 1: '127.0.0.3:abc' has a slot count that is not a whole number" in text, text
    assert "exited with code 3: broken" in text, text
    assert "did not finish in time" in text, text
    assert "keeping the current hosts" in text, text
    assert generations(job) == [("1", "2")], text  # never re-formed


def test_more_hosts_than_max_np_are_not_used(tmp_path):
    hosts = HostsFile(str(tmp_path), ["127.0.0.%d:1" % i for i in range(1, 6)])
    job = ElasticJob(["-np", "2", "--max-np", "3", "--host-discovery-script", hosts.script],
                     command=sleeper(4))
    assert job.finish(60) == 0, job.output()
    assert generations(job) == [("1", "3")], job.output()
    assert len(worker_pids(job)) == 3, job.output()


def test_reset_limit_exceeded_stops_the_job(tmp_path):
    hosts = HostsFile(str(tmp_path), ["127.0.0.%d:1" % i for i in range(1, 4)])
    job = ElasticJob(["-np", "3", "--min-np", "1", "--reset-limit", "1",
                      "--host-discovery-script", hosts.script], command=sleeper(60))
    job.wait_for(lambda: len(worker_pids(job)) == 3, 30, "three workers")
    pids = list(worker_pids(job).values())
    os.kill(pids[0], signal.SIGKILL)
    job.wait_for(lambda: len(generations(job)) == 2, 30, "the first reset")
    os.kill(pids[1], signal.SIGKILL)
    began = time.monotonic()
    assert job.finish(30) == 1, job.output()
    assert time.monotonic() - began < 15  # the grace period at most, not the workers' 60 s
    assert "--reset-limit 1 exceeded" in job.launcher_text(), job.output()


def test_below_min_np_for_the_elastic_timeout_ends_the_job(tmp_path):
    hosts = HostsFile(str(tmp_path), ["127.0.0.1:1", "127.0.0.2:1"])
    job = ElasticJob(["-np", "2", "--min-np", "2", "--elastic-timeout", "2",
                      "--host-discovery-script", hosts.script], command=sleeper(60))
    job.wait_for(lambda: len(worker_pids(job)) == 2, 30, "two workers")
    os.kill(list(worker_pids(job).values())[0], signal.SIGKILL)
    assert job.finish(30) == 1, job.output()
    text = job.launcher_text()
    assert "fewer than --min-np 2" in text and "--elastic-timeout 2" in text, text


def test_removed_host_loses_its_worker_and_a_new_host_gains_one(tmp_path):
    hosts = HostsFile(str(tmp_path), ["127.0.0.1:1", "127.0.0.2:1"])
    job = ElasticJob(["-np", "2", "--min-np", "1", "--host-discovery-script", hosts.script],
                     command=sleeper(60))
    job.wait_for(lambda: len(worker_pids(job)) == 2, 30, "two workers")
    hosts.write(["127.0.0.1:1", "127.0.0.3:1"])
    job.wait_for(lambda: len(generations(job)) == 2, 30, "the new world")
    assert generations(job)[1] == ("2", "2"), job.output()
    assert "w0@127.0.0.1 w2@127.0.0.3" in job.launcher_text(), job.output()
    job.process.send_signal(signal.SIGINT)
    assert job.finish(30) == 128 + signal.SIGINT, job.output()
