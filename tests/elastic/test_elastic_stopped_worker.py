"""A SIGSTOPped elastic worker: its process lives, its sockets stay open, only its heartbeat
stops. The survivors' liveness monitors notice it (RONDE_LIVENESS_TIMEOUT_SECONDS, 10 s) and
say which rank it is; the driver must take that report, blacklist the worker's host, kill the
worker and re-form the world without it. Before, it re-formed every generation with the
stopped worker in it and the survivors waited the start timeout (60 s) for it each time.

Run twice: on loopback addresses as hosts (127.0.0.x, one slot each: ranks talk TCP) and on
one host with three slots (ranks meet in the shared-memory arena, where the stopped process
keeps its mapping). The helpers (the replay of the job's worlds) are test_elastic_training.py's."""
import os
import signal
import time

import pytest

from elastic_job import ElasticJob, HostsFile
from test_elastic_training import check_done, commits, latest_synced

# (discovery output, the stopped worker's host as the launcher names it)
LAYOUTS = {"tcp": (["127.0.0.%d:1" % i for i in range(1, 4)], "127.0.0.3"),
           "shm": (["localhost:3"], "localhost")}
# The issue's target is 20 s from the stop to the survivors' next step (10 s of it the
# liveness timeout). This bound only tells "recovers" from "hangs": a driver that re-forms with
# the stopped worker needs at least one 60 s start timeout.
RECOVERY_BOUND_SECONDS = 60


def first_steps_after(job, when, size):
    return [t for t, _, f in job.lines("first step") if t > when and int(f["size"]) == size]


def process_state(pid):
    """The state letter of /proc/PID/stat ('T' stopped, 'Z' zombie), or None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_stopped_worker_is_killed_and_the_job_goes_on(tmp_path, layout):
    discovered, victim_host = LAYOUTS[layout]
    hosts = HostsFile(str(tmp_path), discovered)
    job = ElasticJob(["-np", "3", "--min-np", "2", "--host-discovery-script", hosts.script,
                      "--elastic-timeout", "120"],
                     # Slow steps: the job must still be training when the stop is noticed
                     # (10-12 s) and the survivors have re-formed.
                     ["--epochs", "6", "--commit-every", "3", "--step-delay", "0.05"])
    victim = None
    try:
        job.wait_for(lambda: latest_synced(job, 3) and commits(job) and commits(job)[-1][1] >= 9,
                     120, "three workers to train past step 9")
        world = latest_synced(job, 3)
        victim = world[2]
        survivors = {world[0], world[1]}
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.time()
        job.wait_for(lambda: len(first_steps_after(job, stopped_at, 2)) == 2,
                     RECOVERY_BOUND_SECONDS, "the two survivors' next step without the "
                     "stopped worker")
        recovered = max(first_steps_after(job, stopped_at, 2)) - stopped_at
        # A benchmark number for the report, not a pass/fail criterion beyond the bound above.
        print("%s: SIGSTOP -> survivors' next step on 2 workers: %.2f s" % (layout, recovered))
        assert job.finish(180) == 0, job.output()
        assert set(latest_synced(job, 2).values()) == survivors, job.output()
        check_done(job, 2, survivors, 6)
        text = job.launcher_text()
        assert "stopped answering" in text, job.output()
        assert "host %s blacklisted for the rest of the job" % victim_host in text, job.output()
        # Killed by the driver, and reaped: no stopped process left behind.
        assert process_state(victim) is None, (process_state(victim), job.output())
        # It never rejoined: every generation after the stop has two workers.
        generations = [line for line in text.splitlines() if "ronde run: generation " in line]
        assert generations and " 2 workers " in generations[-1], job.output()
    finally:
        if victim is not None and process_state(victim) is not None:
            os.kill(victim, signal.SIGKILL)
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()
