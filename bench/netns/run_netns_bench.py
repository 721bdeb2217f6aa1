#!/usr/bin/python3
"""Allreduce across namespace hosts on tc-shaped links, ronde against OpenMPI, and job startup.

Builds 3 hosts from network namespaces (tests/launcher/netns_hosts.py: a bridge, a veth per
host, sshd in each), caps every host's link at --rate each way with tbf (shaped_links.py),
and measures on those links:

  1. the ceiling: one TCP stream each way at once between two hosts (tcp_stream.py);
  2. allreduce of large float32 buffers across 2 and 3 hosts, 1 and 2 ranks per host:
     `ronde run` + examples/allreduce_demo against `mpirun` + mpi_allreduce.c (OpenMPI,
     ob1 with self,vader,tcp: shared memory inside a host, TCP across, as ronde does);
  3. time from starting the launcher to every worker able to communicate (init_probe.cc /
     `mpi_allreduce --init-probe`): locally with 2 and 4 ranks and over ssh with 2 hosts x 2.

--collective allgather|reducescatter measures that instead of allreduce in step 2
(blocks_job.cc against `mpi_allreduce --allgather|--reducescatter`; --sizes is then the whole
buffer, each rank's block its share): the link carries (h-1)/h of the buffer each way,
whatever happens inside a host.

Link bandwidth is algbw * 2(h-1)/h with h hosts: what each host's link carries, per second,
in a bandwidth-optimal allreduce, whatever happens inside a host. It is the NCCL bus
bandwidth when there is one rank per host. Every figure is the median of --repeat runs.

  sudo /usr/bin/python3 bench/netns/run_netns_bench.py --build build [--rate 1gbit]

To compare ronde against itself in the same run (interleaved with OpenMPI in every round):
--baseline-build DIR adds another build's launcher and demo (e.g. main's code) as "before";
--variant LABEL:NAME=VALUE[,NAME=VALUE] adds this build with RONDE_* settings (the launcher
forwards them to every host), e.g. --variant chunk1m:RONDE_HIERARCHICAL_CHUNK_BYTES=1048576.
--layouts 2x1,2x2,3x2 picks hosts x ranks per host instead of every --hosts x {1, 2}.

Needs root (namespaces, tc), openssh-server, OpenMPI (mpicc, mpirun) and g++. Namespaces,
qdiscs, sshd and temporary files are removed on exit, also on failure or SIGTERM.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from shaped_links import CannotMakeHosts, ShapedHosts, rate_bits

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MS_PER_CALL = re.compile(r"([\d.]+) ms per (?:allreduce|allgather|reducescatter)")
TRANSPORT = re.compile(r"(\d+) ranks over (.+?), ")
PROBE = re.compile(r"init-probe rank (\d+) ready ([\d.]+)")
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "BatchMode=yes"]


def log(*parts):
    print("#", *parts, file=sys.stderr, flush=True)


class CpuSampler:
    """Busy share of all CPUs of the machine between start() and stop() (/proc/stat)."""

    @staticmethod
    def _read():
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    def start(self):
        self.begin = self._read()

    def stop(self):
        busy, total = self._read()
        return (busy - self.begin[0]) / max(1, total - self.begin[1])


def compile_against(build, source, output):
    """Compiles one of this folder's C++ programs against libronde of `build`."""
    subprocess.run(["g++", "-std=c++20", "-O2", "-I", os.path.join(ROOT, "include"),
                    os.path.join(HERE, source), "-o", output, "-L", build,
                    "-Wl,-rpath," + build, "-lronde"], check=True)


def build_tools(build, workdir):
    """Compiles init_probe (against libronde of `build`) and mpi_allreduce (mpicc)."""
    probe = os.path.join(workdir, "init_probe")
    compile_against(build, "init_probe.cc", probe)
    mpi = os.path.join(workdir, "mpi_allreduce")
    subprocess.run(["mpicc", "-O2", "-std=gnu11", os.path.join(HERE, "mpi_allreduce.c"), "-o",
                    mpi], check=True)
    return probe, mpi


def run_job(command, timeout=900, env=None):
    """Runs a job; returns (stdout, seconds from start to exit, machine CPU busy share)."""
    sampler = CpuSampler()
    sampler.start()
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            start_new_session=True,
                            env=dict(os.environ, **env) if env else None)
    seconds = time.monotonic() - start
    busy = sampler.stop()
    if result.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(command[:12]), result.returncode,
                                                     result.stdout[-3000:],
                                                     result.stderr[-3000:]))
    return result.stdout, seconds, busy


class RondeVariant:
    """One ronde to measure: a build's launcher and demo, and settings for its workers."""

    def __init__(self, label, build, env=None):
        self.label = label
        self.build = build
        self.ronde = os.path.join(build, "src", "launcher", "ronde")
        self.demo = os.path.join(build, "examples", "allreduce_demo")
        self.blocks_job = None  # blocks_job, compiled against this build when asked for
        self.env = env or {}
        for path in (self.ronde, self.demo):
            if not os.access(path, os.X_OK):
                sys.exit("run_netns_bench: %s is not built (ninja -C %s ronde_cli allreduce_demo)"
                         % (path, build))


def parse_variant(text, build):
    label, _, settings = text.partition(":")
    env = {}
    for item in filter(None, settings.split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name.startswith(("RONDE_", "HOROVOD_")):
            sys.exit("run_netns_bench: --variant %r: want LABEL:RONDE_NAME=VALUE,..." % text)
        env[name] = value
    return RondeVariant(label, build, env)


class Jobs:
    """The command lines of both launchers for a layout of hosts."""

    def __init__(self, ronde, demo, mpi, hosts):
        self.ronde = ronde
        self.demo = demo
        self.mpi = mpi
        self.hosts = hosts
        self.mpi_tuning = []

    @property
    def mpi_net(self):
        return "10.231.%d.0/24" % self.hosts.hosts.subnet

    def host_list(self, nhosts, per_host):
        return ",".join("%s:%d" % (a, per_host) for a in self.hosts.addresses[:nhosts])

    def ronde_remote(self, nhosts, per_host, program):
        return ([self.ronde, "run"] + self.hosts.hosts.ssh_args() +
                ["-np", str(nhosts * per_host), "-H", self.host_list(nhosts, per_host)] + program)

    def mpi_remote(self, nhosts, per_host, program):
        rsh = " ".join(["-i", self.hosts.hosts.key] + SSH_OPTIONS)
        return (["mpirun", "--allow-run-as-root", "-np", str(nhosts * per_host),
                 "-H", self.host_list(nhosts, per_host),
                 "--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args", rsh,
                 "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
                 "--mca", "btl_tcp_if_include", self.mpi_net,
                 "--mca", "oob_tcp_if_include", self.mpi_net] + self.mpi_tuning + program)

    def ronde_local(self, ranks, program):
        return [self.ronde, "run", "-np", str(ranks)] + program

    def mpi_local(self, ranks, program):
        return (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                 "--mca", "pml", "ob1", "--mca", "btl", "self,vader"] + program)


def tcp_ceiling(hosts, mib, repeat):
    """Median MB/s of one stream each way at once between hosts 0 and 1 (both directions)."""
    script = os.path.join(HERE, "tcp_stream.py")
    server_ns, client_ns = hosts.hosts.namespaces[:2]
    address = hosts.addresses[0]
    rates = []
    for attempt in range(repeat):
        port = str(23000 + attempt)
        server = subprocess.Popen(["ip", "netns", "exec", server_ns, sys.executable, script,
                                   "serve", address, port, str(mib)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            server.stdout.readline()  # listening
            client = subprocess.run(["ip", "netns", "exec", client_ns, sys.executable, script,
                                     "connect", address, port, str(mib)], capture_output=True,
                                    text=True, timeout=300, check=True)
            served = server.communicate(timeout=60)[0]
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        for line in (client.stdout, served):
            got, seconds = re.search(r"received (\d+) in ([\d.]+)", line).groups()
            rates.append(int(got) / float(seconds) / 1e6)
    return statistics.median(rates)


def allreduce_seconds(command, env=None):
    stdout, _, busy = run_job(command, env=env)
    ms = MS_PER_CALL.search(stdout)
    if ms is None:
        raise RuntimeError("no timing in output of %s:\n%s" % (command[0], stdout))
    transport = TRANSPORT.search(stdout)
    return float(ms.group(1)) / 1e3, busy, transport.group(2) if transport else "?"


def ronde_seconds(jobs, variant, nhosts, per_host, size_args, collective):
    saved = jobs.ronde
    jobs.ronde = variant.ronde
    program = [variant.demo] if collective == "allreduce" else [variant.blocks_job, collective]
    try:
        command = jobs.ronde_remote(nhosts, per_host, program + size_args)
    finally:
        jobs.ronde = saved
    return allreduce_seconds(command, variant.env)


def bench_allreduce(jobs, args, link_bytes):
    rows = []
    for nhosts, per_host in args.layouts:
        for mib in args.sizes:
            iterations = args.iterations if mib <= 64 else max(2, args.iterations // 2)
            size_args = [str(mib), str(iterations)]
            runs = {v.label: [] for v in args.variants}
            runs["mpi"] = []
            # Interleaved, so drifting load hits every contender alike.
            for _ in range(args.repeat):
                for variant in args.variants:
                    runs[variant.label].append(ronde_seconds(
                        jobs, variant, nhosts, per_host, size_args, args.collective))
                if not args.skip_mpi:
                    mode = [] if args.collective == "allreduce" else ["--" + args.collective]
                    runs["mpi"].append(allreduce_seconds(
                        jobs.mpi_remote(nhosts, per_host, [jobs.mpi] + mode + size_args)))
            # What each host's link must carry each way in a bandwidth-optimal algorithm.
            passes = 2 if args.collective == "allreduce" else 1
            bytes_moved = mib * 2**20 * passes * (nhosts - 1) / nhosts
            row = {"hosts": nhosts, "per_host": per_host, "mib": mib,
                   "transport": runs["ronde"][0][2]}
            for name, measured in runs.items():
                if not measured:
                    continue
                seconds = statistics.median(r[0] for r in measured)
                row[name] = {"ms": seconds * 1e3, "runs_ms": [r[0] * 1e3 for r in measured],
                             "link": bytes_moved / seconds / link_bytes,
                             "cpu": statistics.median(r[1] for r in measured)}
            rows.append(row)
            log(args.collective, row)
    return rows


def bench_inside_host(jobs, args):
    """2 ranks on this host (shared memory): the intra-host share of the hierarchical runs."""
    rows = []
    for mib in args.sizes:
        iterations = args.iterations if mib <= 64 else max(2, args.iterations // 2)
        size_args = [str(mib), str(iterations)]
        ronde = [allreduce_seconds(jobs.ronde_local(2, [jobs.demo] + size_args))[0]
                 for _ in range(args.repeat)]
        row = {"mib": mib, "ronde_ms": statistics.median(ronde) * 1e3}
        if not args.skip_mpi:
            mpi = [allreduce_seconds(jobs.mpi_local(2, [jobs.mpi] + size_args))[0]
                   for _ in range(args.repeat)]
            row["mpi_ms"] = statistics.median(mpi) * 1e3
        rows.append(row)
        log("inside one host", row)
    return rows


def startup_seconds(command, ranks):
    start = time.time()
    stdout, seconds, _ = run_job(command, timeout=120)
    ready = [float(t) for _, t in PROBE.findall(stdout)]
    if len(ready) != ranks:
        raise RuntimeError("%d of %d ranks reported ready:\n%s" % (len(ready), ranks, stdout))
    return max(ready) - start, seconds


def bench_startup(jobs, args):
    rows = []
    cases = [
        ("this host", 2, jobs.ronde_local(2, [jobs.probe]),
         jobs.mpi_local(2, [jobs.mpi, "--init-probe"])),
        ("this host", 4, jobs.ronde_local(4, [jobs.probe]),
         jobs.mpi_local(4, [jobs.mpi, "--init-probe"])),
        ("2 hosts x 2, ssh", 4, jobs.ronde_remote(2, 2, [jobs.probe]),
         jobs.mpi_remote(2, 2, [jobs.mpi, "--init-probe"])),
    ]
    for where, ranks, ronde_command, mpi_command in cases:
        ronde, mpi = [], []
        for _ in range(args.startup_repeat):
            ronde.append(startup_seconds(ronde_command, ranks))
            if not args.skip_mpi:
                mpi.append(startup_seconds(mpi_command, ranks))
        row = {"where": where, "ranks": ranks}
        for name, runs in (("ronde", ronde), ("mpi", mpi)):
            if runs:
                row[name] = {"ready": statistics.median(r[0] for r in runs),
                             "ready_min": min(r[0] for r in runs),
                             "exit": statistics.median(r[1] for r in runs)}
        rows.append(row)
        log("startup", row)
    return rows


def print_tables(args, ceiling, link_bytes, allreduce, inside, startup):
    rate = args.rate
    print("Links: tbf %s each way on every host (both ends of its veth); %s CPUs on the "
          "machine (load average at the end: %.1f); medians of %d runs." % (
              rate, os.cpu_count(), os.getloadavg()[0], args.repeat))
    if ceiling is not None:
        print("\nTCP ceiling, one stream each way at once between 2 hosts: %.1f MB/s = %.1f%% "
              "of %s\n" % (ceiling, 100 * ceiling * 1e6 / link_bytes, rate))
    print("| hosts | ranks/host | MiB | ronde ms | ronde % of link | OpenMPI ms | "
          "OpenMPI % of link | ronde / OpenMPI | CPU busy ronde / MPI | ronde transport |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in allreduce:
        r, m = row["ronde"], row.get("mpi")
        print("| %d | %d | %d | %.0f | %.1f%% | %s | %s | %s | %.0f%% / %s | %s |" % (
            row["hosts"], row["per_host"], row["mib"], r["ms"], 100 * r["link"],
            "%.0f" % m["ms"] if m else "-", "%.1f%%" % (100 * m["link"]) if m else "-",
            "%.2fx" % (m["ms"] / r["ms"]) if m else "-", 100 * r["cpu"],
            "%.0f%%" % (100 * m["cpu"]) if m else "-", row["transport"]))
    others = [v.label for v in args.variants if v.label != "ronde"]
    if others:
        print("\nThe same rounds, each ronde variant against this build (\"ronde\") and "
              "OpenMPI: %% of link, and ms per %s (every run).\n" % args.collective)
        print("| hosts | ranks/host | MiB | %s |" % " | ".join(["ronde"] + others + ["OpenMPI"]))
        print("|---|---|---|%s" % ("---|" * (len(others) + 2)))
        for row in allreduce:
            cells = []
            for name in ["ronde"] + others + ["mpi"]:
                r = row.get(name)
                cells.append("%.1f%% (%s)" % (100 * r["link"], "/".join(
                    "%.0f" % ms for ms in r["runs_ms"])) if r else "-")
            print("| %d | %d | %d | %s |" % (row["hosts"], row["per_host"], row["mib"],
                                              " | ".join(cells)))
    if inside:
        print("\nInside one host, 2 ranks, shared memory (no link): the intra-host steps of "
              "the 2-ranks-per-host rows.\n")
        print("| MiB | ronde ms | OpenMPI ms |")
        print("|---|---|---|")
        for row in inside:
            mpi = row.get("mpi_ms")
            print("| %d | %.0f | %s |" % (row["mib"], row["ronde_ms"],
                                          "%.0f" % mpi if mpi else "-"))
    if not startup:
        return
    print("\nStartup: from starting the launcher to every rank past init + a barrier "
          "(median, min in brackets), and to the launcher's exit; medians of %d runs.\n"
          % args.startup_repeat)
    print("| layout | ranks | ronde run: ready | ronde run: exit | mpirun: ready | "
          "mpirun: exit |")
    print("|---|---|---|---|---|---|")
    for row in startup:
        cells = []
        for name in ("ronde", "mpi"):
            s = row.get(name)
            cells += (["%.0f ms (%.0f)" % (s["ready"] * 1e3, s["ready_min"] * 1e3),
                       "%.0f ms" % (s["exit"] * 1e3)] if s else ["-", "-"])
        print("| %s | %d | %s |" % (row["where"], row["ranks"], " | ".join(cells)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="ronde build directory (src/launcher/ronde, examples/allreduce_demo)")
    parser.add_argument("--rate", default="1gbit", help="tc rate of every link, each way")
    parser.add_argument("--sizes", default="64,256", help="MiB per allreduce, comma-separated")
    parser.add_argument("--hosts", default="2,3", help="host counts, comma-separated (max 3)")
    parser.add_argument("--iterations", type=int, default=4,
                        help="timed allreduces per run (halved above 64 MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration")
    parser.add_argument("--startup-repeat", type=int, default=5)
    parser.add_argument("--skip-mpi", action="store_true")
    parser.add_argument("--mpi-allreduce-algorithm", type=int,
                        help="force OpenMPI's coll/tuned allreduce algorithm across hosts "
                             "(4: ring, 5: segmented ring, 6: rabenseifner); default: its own decision")
    parser.add_argument("--layouts",
                        help="hosts x ranks per host, comma-separated (e.g. 2x1,2x2,3x2); "
                             "default: every --hosts with 1 and 2 ranks per host")
    parser.add_argument("--baseline-build",
                        help="another ronde build measured in the same rounds, as 'before'")
    parser.add_argument("--variant", action="append", default=[],
                        help="LABEL:RONDE_NAME=VALUE,...: this build with those settings, "
                             "measured in the same rounds (repeatable)")
    parser.add_argument("--collective", choices=("allreduce", "allgather", "reducescatter"),
                        default="allreduce",
                        help="what step 2 measures (allgather, reducescatter: --sizes is the "
                             "whole buffer)")
    parser.add_argument("--skip-allreduce", action="store_true",
                        help="skip step 2 (and the inside-host runs)")
    parser.add_argument("--skip-startup", action="store_true")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.hosts = [int(h) for h in args.hosts.split(",")]
    if args.layouts:
        args.layouts = [tuple(int(n) for n in l.split("x")) for l in args.layouts.split(",")]
        args.hosts = sorted({h for h, _ in args.layouts})
    else:
        args.layouts = [(h, p) for h in args.hosts for p in (1, 2)]
    build = os.path.abspath(args.build)
    args.variants = [RondeVariant("ronde", build)]
    if args.baseline_build:
        args.variants.append(RondeVariant("before", os.path.abspath(args.baseline_build)))
    args.variants += [parse_variant(v, build) for v in args.variant]
    ronde, demo = args.variants[0].ronde, args.variants[0].demo

    # SIGTERM/SIGHUP unwind through the finally blocks below like Ctrl-C does.
    def stop(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    workdir = tempfile.mkdtemp(prefix="ronde-netns-bench-")
    hosts = None
    jobs = Jobs(ronde, demo, None, None)
    if args.mpi_allreduce_algorithm is not None:
        jobs.mpi_tuning = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca",
                           "coll_tuned_allreduce_algorithm", str(args.mpi_allreduce_algorithm)]
    try:
        probe, mpi = build_tools(build, workdir)
        if args.collective != "allreduce":
            for index, variant in enumerate(args.variants):
                variant.blocks_job = os.path.join(workdir, "blocks_job_%d" % index)
                compile_against(variant.build, "blocks_job.cc", variant.blocks_job)
        try:
            hosts = ShapedHosts(max(args.hosts), args.rate)
        except CannotMakeHosts as why:
            sys.exit("run_netns_bench: cannot make namespace hosts: %s" % why)
        log(hosts.describe())
        link_bytes = rate_bits(args.rate) / 8
        jobs.mpi, jobs.probe, jobs.hosts = mpi, probe, hosts
        ceiling = tcp_ceiling(hosts, 128, args.repeat) if not args.skip_allreduce else None
        allreduce = [] if args.skip_allreduce else bench_allreduce(jobs, args, link_bytes)
        inside = ([] if args.skip_allreduce or args.collective != "allreduce"
                  else bench_inside_host(jobs, args))
        startup = [] if args.skip_startup else bench_startup(jobs, args)
        print_tables(args, ceiling, link_bytes, allreduce, inside, startup)
    finally:
        if hosts is not None:
            hosts.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
