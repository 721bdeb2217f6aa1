"""Runs an elastic `ronde run` job for the tests and reads its output as it comes."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "elastic_train_digits.py")
LINE = re.compile(r"^\[(\d+)\]<(stdout|stderr)>:(.*)$")


def ronde_binary():
    path = os.environ.get("RONDE_BIN") or shutil.which("ronde")
    if not path:
        raise RuntimeError("set RONDE_BIN to the ronde binary (ctest does this)")
    return path


def worker_python():
    return os.environ.get("RONDE_TEST_PYTHON") or sys.executable


def fields(text):
    """{'pid': '12', 'rank': '0', ...} of an "elastic: ... key=value" line."""
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


class HostsFile:
    """The discovery script's answer: a file the test rewrites, and a script that prints it."""

    def __init__(self, directory, hosts):
        self.path = os.path.join(directory, "hosts")
        self.script = os.path.join(directory, "discover.sh")
        self.write(hosts)
        with open(self.script, "w") as f:
            f.write("#!/bin/sh\ncat %s\n" % self.path)
        os.chmod(self.script, 0o755)

    def write(self, hosts):
        with open(self.path + ".tmp", "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(self.path + ".tmp", self.path)


class ElasticJob:
    """`ronde run` of the elastic example (or `command`), its lines collected with the time
    they arrived: events are (time, worker id, stream, text)."""

    def __init__(self, launcher_args, script_args=(), command=None, env=None):
        if command is None:
            command = [worker_python(), EXAMPLE] + list(script_args)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.process = subprocess.Popen([ronde_binary(), "run"] + list(launcher_args) + command,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=full_env)
        self.events = []
        self.launcher_lines = []
        self._lock = threading.Lock()
        self._readers = [threading.Thread(target=self._read, args=(self.process.stdout,)),
                         threading.Thread(target=self._read, args=(self.process.stderr,))]
        for reader in self._readers:
            reader.daemon = True
            reader.start()

    def _read(self, stream):
        for line in stream:
            line = line.rstrip("\n")
            now = time.time()
            match = LINE.match(line)
            with self._lock:
                if match:
                    self.events.append((now, int(match.group(1)), match.group(2),
                                        match.group(3)))
                else:
                    self.launcher_lines.append((now, line))

    def lines(self, prefix):
        """(time, worker, fields) of the example's "elastic: <prefix>" lines so far."""
        found = []
        with self._lock:
            for when, worker, _, text in self.events:
                if text.startswith("elastic: " + prefix):
                    found.append((when, worker, fields(text)))
        return found

    def launcher_text(self):
        with self._lock:
            return "\n".join(line for _, line in self.launcher_lines)

    def output(self):
        with self._lock:
            worker_lines = ["[%d] %s" % (w, t) for _, w, _, t in self.events]
        return self.launcher_text() + "\n" + "\n".join(worker_lines[-200:])

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        if predicate():
            return
        raise AssertionError("waited %.0f s for %s\n%s" % (timeout, what, self.output()))

    def finish(self, timeout):
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            raise AssertionError("the job did not end in %.0f s\n%s" % (timeout, self.output()))
        for reader in self._readers:
            reader.join(timeout=5)
        return code
