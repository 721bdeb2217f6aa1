"""TensorFlow and Keras elastic training end to end: real workers under
`ronde run --host-discovery-script`, a worker SIGKILLed in the middle of training (2 -> 1
ranks) or a host added (1 -> 2), for the TF2 custom loop (examples/tensorflow2_elastic_digits.py:
DistributedGradientTape in a tf.function, TensorFlowKerasState) and Keras 3 model.fit
(examples/keras_elastic_digits.py: KerasState and the three callbacks).

Each job's final parameters are held to replay_tf.py: the same training replayed in one
process with plain TensorFlow over the worlds the job reported, so a committed step lost, a
sample skipped or taken twice, a wrong learning rate after a reset or state synced from the
wrong rank fails the test. Hosts are loopback addresses (127.0.0.x, one slot each): distinct
hosts to ronde, so ranks talk TCP.

Run under plain pytest (not `ronde run`): these tests start their own jobs. RONDE_BIN names
the ronde binary (default: the one on PATH)."""
import os
import signal
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "elastic"))
sys.path.insert(0, HERE)
from elastic_job import ElasticJob, HostsFile, worker_python  # noqa: E402

if os.environ.get("RONDE_STORE_ADDRESS"):
    pytest.skip("starts its own `ronde run` jobs: run it under plain pytest",
                allow_module_level=True)

from replay_tf import replay_custom_loop, replay_model_fit, SUM_ORDERS  # noqa: E402

HOSTS = ["127.0.0.1:1", "127.0.0.2:1"]
CUSTOM_LOOP = os.path.join(ROOT, "examples", "tensorflow2_elastic_digits.py")
MODEL_FIT = os.path.join(ROOT, "examples", "keras_elastic_digits.py")
LR = 0.02
# Rounding only: the replay computes each rank's gradient in its own tf.function and sums
# them as the runtime does, but TensorFlow's kernels (and Keras's compiled train step) may
# associate differently over ~200 steps: seen up to ~1e-6. A lost or repeated step, or one
# at a wrong learning rate, moves some parameter by more than 1e-3.
TOLERANCE = 1e-4
ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow",
       "PYTHONWARNINGS": "ignore::DeprecationWarning"}


def start(tmp_path, hosts, launcher_args, example, example_args):
    command = [worker_python(), example, "--save", str(tmp_path / "final.npz")] + example_args
    return ElasticJob(["--host-discovery-script", hosts.script, "--elastic-timeout", "60"] +
                      launcher_args, command=command, env=ENV)


def latest_synced(job, size):
    """{rank: pid} of the newest world of `size` ranks that has synced on every rank."""
    seen = {}
    for _, _, f in job.lines("synced"):
        if int(f["size"]) == size:
            seen[int(f["rank"])] = int(f["pid"])
    return seen if len(seen) == size else None


def committed(job, step):
    return any(int(f["step"]) >= step for _, _, f in job.lines("commit"))


def schedule_of(job, keys):
    """The worlds in the order they synced: consecutive "synced" lines (by the workers'
    clocks) with the same fields are one world."""
    schedule = []
    for f in sorted((f for _, _, f in job.lines("synced")), key=lambda f: float(f["t"])):
        world = (int(f["size"]),) + tuple(int(f[k]) for k in keys)
        if not schedule or schedule[-1] != world:
            schedule.append(world)
    return schedule


def kill_and_check_resume(job, victim_pid, size_after):
    """SIGKILLs a worker; checks the survivors resumed from the last step committed before
    they did (no committed step lost, none invented)."""
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.time()

    def resumed():
        return [(t, f) for t, _, f in job.lines("synced")
                if t > killed_at and int(f["size"]) == size_after]

    job.wait_for(lambda: len(resumed()) == size_after, 90, "the survivors to re-form")
    resumed_at = min(t for t, _ in resumed())
    steps = {int(f["step"]) for _, f in resumed()}
    assert len(steps) == 1, job.output()
    last_commit = max(int(f["step"]) for t, _, f in job.lines("commit") if t < resumed_at)
    assert steps.pop() == last_commit, job.output()


def finish_and_compare(job, tmp_path, final_size, survivors, replay, schedule, epochs):
    assert job.finish(240) == 0, job.output()
    done = [f for _, _, f in job.lines("done")]
    assert len(done) == final_size, job.output()
    assert all(f["identical"] == "True" for f in done), job.output()
    assert survivors <= {int(f["pid"]) for f in done}, "a survivor was restarted\n" + job.output()
    assert schedule[-1][0] == final_size, (schedule, job.output())
    with np.load(str(tmp_path / "final.npz")) as saved:
        final = [saved["arr_%d" % i] for i in range(len(saved.files))]
    tried = []
    for name, order in SUM_ORDERS.items():
        expected = replay(schedule, epochs, LR, 32, order)
        difference = max(float(np.max(np.abs(a - b))) for a, b in zip(final, expected))
        tried.append((name, difference))
        if difference < TOLERANCE:
            break
    print("schedule %s: max |job - replay| %s" % (schedule, tried))
    assert tried[-1][1] < TOLERANCE, (
        "the parameters differ from every replay of %s: %s\n%s" % (schedule, tried,
                                                                   job.output()))
    # The comparison tells a wrong history apart: the same job without its change of world
    # (every step on the first world's size and learning rate) lands far outside TOLERANCE.
    unchanged = replay(schedule[:1], epochs, LR, 32, SUM_ORDERS["rank order"])
    apart = max(float(np.max(np.abs(a - b))) for a, b in zip(final, unchanged))
    assert apart > 100 * TOLERANCE, (schedule, apart)
    return done


def test_custom_loop_worker_killed_two_to_one(tmp_path):
    hosts = HostsFile(str(tmp_path), HOSTS)
    epochs = 4
    job = start(tmp_path, hosts, ["-np", "2", "--min-np", "1", "--max-np", "2"],
                CUSTOM_LOOP, ["--epochs", str(epochs), "--commit-every", "4",
                              "--step-delay", "0.03"])
    job.wait_for(lambda: latest_synced(job, 2) and committed(job, 12), 180,
                 "two workers to commit step 12")
    world = latest_synced(job, 2)
    kill_and_check_resume(job, world[1], 1)
    finish_and_compare(job, tmp_path, 1, {world[0]}, replay_custom_loop,
                       schedule_of(job, ("step", "epoch", "offset")), epochs)


def test_custom_loop_rank_zero_killed_state_from_the_other(tmp_path):
    # The survivor was rank 1: it becomes rank 0 of the new world and its state is the one
    # every rank (here: itself) continues from; a fresh worker would not be synced from.
    hosts = HostsFile(str(tmp_path), HOSTS)
    epochs = 3
    job = start(tmp_path, hosts, ["-np", "2", "--min-np", "1", "--max-np", "2"],
                CUSTOM_LOOP, ["--epochs", str(epochs), "--commit-every", "3",
                              "--step-delay", "0.03"])
    job.wait_for(lambda: latest_synced(job, 2) and committed(job, 9), 180,
                 "two workers to commit step 9")
    world = latest_synced(job, 2)
    kill_and_check_resume(job, world[0], 1)
    assert latest_synced(job, 1) == {0: world[1]}, job.output()
    finish_and_compare(job, tmp_path, 1, {world[1]}, replay_custom_loop,
                       schedule_of(job, ("step", "epoch", "offset")), epochs)


def test_custom_loop_host_added_one_to_two(tmp_path):
    hosts = HostsFile(str(tmp_path), HOSTS[:1])
    epochs = 3
    job = start(tmp_path, hosts, ["-np", "1", "--min-np", "1", "--max-np", "2"],
                CUSTOM_LOOP, ["--epochs", str(epochs), "--commit-every", "4",
                              "--step-delay", "0.05"])
    job.wait_for(lambda: latest_synced(job, 1) and committed(job, 8), 180,
                 "one worker to commit step 8")
    first = latest_synced(job, 1)
    hosts.write(HOSTS)
    # The running worker learns of the new world at a commit and re-forms without loss.
    job.wait_for(lambda: latest_synced(job, 2), 120, "a second worker to join")
    schedule = schedule_of(job, ("step", "epoch", "offset"))
    assert [world[0] for world in schedule] == [1, 2], schedule
    finish_and_compare(job, tmp_path, 2, set(first.values()), replay_custom_loop,
                       schedule_of(job, ("step", "epoch", "offset")), epochs)


def test_keras_model_fit_worker_killed_two_to_one(tmp_path):
    hosts = HostsFile(str(tmp_path), HOSTS)
    epochs = 4
    job = start(tmp_path, hosts, ["-np", "2", "--min-np", "1", "--max-np", "2"],
                MODEL_FIT, ["--epochs", str(epochs), "--batches-per-commit", "4",
                            "--step-delay", "0.03"])
    job.wait_for(lambda: latest_synced(job, 2) and committed(job, 12), 180,
                 "two workers to commit step 12")
    world = latest_synced(job, 2)
    kill_and_check_resume(job, world[1], 1)
    done = finish_and_compare(job, tmp_path, 1, {world[0]}, replay_model_fit,
                              schedule_of(job, ("step", "epoch")), epochs)
    assert int(done[0]["epoch"]) == epochs, job.output()


def test_keras_model_fit_host_added_one_to_two(tmp_path):
    hosts = HostsFile(str(tmp_path), HOSTS[:1])
    epochs = 3
    job = start(tmp_path, hosts, ["-np", "1", "--min-np", "1", "--max-np", "2"],
                MODEL_FIT, ["--epochs", str(epochs), "--batches-per-commit", "4",
                            "--step-delay", "0.05"])
    job.wait_for(lambda: latest_synced(job, 1) and committed(job, 8), 180,
                 "one worker to commit step 8")
    first = latest_synced(job, 1)
    hosts.write(HOSTS)
    # The running worker learns of the new world at a commit (HostsUpdatedInterrupt from
    # CommitStateCallback) and re-forms without losing a step; the new worker is synced.
    job.wait_for(lambda: latest_synced(job, 2), 120, "a second worker to join")
    schedule = schedule_of(job, ("step", "epoch"))
    assert [world[0] for world in schedule] == [1, 2], schedule
    done = finish_and_compare(job, tmp_path, 2, set(first.values()), replay_model_fit,
                              schedule_of(job, ("step", "epoch")), epochs)
    assert {int(f["epoch"]) for f in done} == {epochs}, job.output()
