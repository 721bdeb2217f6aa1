"""Namespace hosts (tests/launcher/netns_hosts.py) whose links are shaped with tc.

Every host reaches the bridge through one veth pair. A token bucket (tbf) on both ends of
that pair caps the host at `rate` in each direction: the host's eth0 shapes what it sends,
the bridge-side peer shapes what it receives. So every host has a full-duplex link of
`rate`, like a NIC on a non-blocking switch.
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "launcher"))

from netns_hosts import CannotMakeHosts, NamespaceHosts  # noqa: E402

_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bits(rate):
    """tc's spelling ('1gbit', '500mbit') to bits per second (tc's units are powers of 10)."""
    for unit in sorted(_UNITS, key=len, reverse=True):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * _UNITS[unit]
    raise ValueError("rate %r: expected a number with kbit, mbit or gbit" % rate)


def _tc(namespace, *args, check=True):
    command = (["ip", "netns", "exec", namespace] if namespace else []) + ["tc"] + list(args)
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise CannotMakeHosts("%s: %s" % (" ".join(command), result.stderr.strip()))
    return result


class ShapedHosts:
    def __init__(self, count, rate, burst="256kb", latency="10ms"):
        self.rate = rate
        self.hosts = NamespaceHosts(count)
        self._shaped = []  # (namespace or None, device) with a qdisc to remove
        try:
            for index, namespace in enumerate(self.hosts.namespaces):
                bridge_side = "%sv%d" % (self.hosts.tag, index)
                for where, device in ((None, bridge_side), (namespace, "eth0")):
                    _tc(where, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate,
                        "burst", burst, "latency", latency)
                    self._shaped.append((where, device))
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self):
        return self.hosts.addresses

    def describe(self):
        lines = []
        for where, device in self._shaped:
            shown = _tc(where, "qdisc", "show", "dev", device, check=False).stdout.strip()
            lines.append("%s %s: %s" % (where or "root-ns", device, shown))
        return "\n".join(lines)

    def close(self):
        for where, device in self._shaped:
            _tc(where, "qdisc", "del", "dev", device, "root", check=False)
        self._shaped = []
        self._stop_processes_inside()
        self.hosts.close()  # namespaces (and their veths), bridge, sshd, keys

    def _stop_processes_inside(self):
        """Workers a failed run left in the hosts (a namespace outlives `ip netns del` while
        a process holds it). Only processes in these namespaces, which this bench started."""
        pids = set()
        for namespace in self.hosts.namespaces:
            listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                                    text=True).stdout.split()
            pids.update(int(p) for p in listed)
        pids -= {process.pid for process in self.hosts.sshd}  # NamespaceHosts stops those
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 3
            while pids and time.monotonic() < deadline:
                pids = {pid for pid in pids if os.path.exists("/proc/%d" % pid)}
                time.sleep(0.05)
