"""Hosts for tests, made of network namespaces on this machine.

Each host is a network namespace joined to a bridge in the root namespace by a veth pair,
with its own address in a private test subnet (10.231.N.0/24, used only here), its own host
name (a UTS namespace around its sshd) and an sshd listening on its address with a throwaway
host key. The root namespace holds 10.231.N.1 on the bridge, so the launcher runs there and
reaches every host. Everything is torn down by close(), also after a failed setup.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time


class CannotMakeHosts(Exception):
    """Namespaces, sshd or ssh are not available here: the tests skip with this message."""


def _run(*args, check=True):
    result = subprocess.run(list(args), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise CannotMakeHosts("%s: %s" % (" ".join(args), result.stderr.strip()))
    return result


class NamespaceHosts:
    def __init__(self, count, with_sshd=None):
        """`count` hosts; `with_sshd` (default all) lists the indexes that run sshd."""
        self.tag = "r%d" % (os.getpid() % 100000)
        self.subnet = 20 + os.getpid() % 200
        self.bridge = "%sbr" % self.tag
        self.namespaces = []
        self.addresses = []
        self.hostnames = []
        self.sshd = []
        self.workdir = tempfile.mkdtemp(prefix="ronde-netns-")
        self.key = os.path.join(self.workdir, "id_ed25519")
        with_sshd = range(count) if with_sshd is None else with_sshd
        try:
            self._check_tools()
            self._make_network(count)
            self._make_keys()
            for index in with_sshd:
                self._start_sshd(index)
            for index in with_sshd:
                self._wait_for_sshd(index)
        except BaseException:
            self.close()
            raise

    def ssh_args(self):
        """Options for `ronde run` that reach these hosts without touching ~/.ssh."""
        return ["-i", self.key, "--ssh-option", "UserKnownHostsFile=/dev/null",
                "--ssh-option", "GlobalKnownHostsFile=/dev/null"]

    def close(self):
        for process in self.sshd:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for namespace in self.namespaces:
            _run("ip", "netns", "del", namespace, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _check_tools(self):
        if os.geteuid() != 0:
            raise CannotMakeHosts("needs root to create network namespaces")
        for tool in ("ip", "unshare", "ssh", "ssh-keygen", "/usr/sbin/sshd"):
            if shutil.which(tool) is None:
                raise CannotMakeHosts("%s is not installed" % tool)

    def _make_network(self, count):
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", "10.231.%d.1/24" % self.subnet, "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for index in range(count):
            namespace = "%sh%d" % (self.tag, index)
            veth = "%sv%d" % (self.tag, index)
            address = "10.231.%d.%d" % (self.subnet, index + 2)
            _run("ip", "netns", "add", namespace)
            self.namespaces.append(namespace)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns",
                 namespace)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", namespace, "addr", "add", address + "/24", "dev", "eth0")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            self.addresses.append(address)
            self.hostnames.append("%s-host%d" % (self.tag, index))

    def _make_keys(self):
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
             os.path.join(self.workdir, "host_key"))
        shutil.copy(self.key + ".pub", os.path.join(self.workdir, "authorized_keys"))
        # sshd's privilege separation directory; Debian's service creates it at start.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    def _start_sshd(self, index):
        config = os.path.join(self.workdir, "sshd_config_%d" % index)
        with open(config, "w") as out:
            out.write("\n".join([
                "ListenAddress %s" % self.addresses[index],
                "Port 22",
                "HostKey %s" % os.path.join(self.workdir, "host_key"),
                "PidFile none",
                "AuthorizedKeysFile %s" % os.path.join(self.workdir, "authorized_keys"),
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PrintMotd no",
                "LogLevel ERROR",
                "MaxStartups 100",
                "MaxSessions 100",
            ]) + "\n")
        command = ("hostname %s && exec /usr/sbin/sshd -D -e -f %s"
                   % (self.hostnames[index], config))
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[index], "unshare", "--uts", "sh", "-c",
             command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.sshd.append(process)

    def _wait_for_sshd(self, index):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.addresses[index], 22), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise CannotMakeHosts("sshd on %s did not come up" % self.addresses[index])
