#!/usr/bin/python3
"""Runs ronde, OpenMPI and Gloo collectives in one run, with MPICH and oneCCL beside them when
bench/setup_peers.sh has built them (--peers-dir), and prints one table per (collective,
ranks), then the targets of issues 2 and 15 with met / not met.

    bench/run_collectives_bench.py --build-dir build-bench [--ranks 2,4] [--sizes 4K:256M]

Every program prints RESULT lines (bench/harness.h); this script only launches them, reads
those lines and lays them out. Raw lines go to --raw, the tables to stdout and --markdown.
"""

import argparse
import json
import os
import shutil
import tempfile
import re
import subprocess
import sys
import time

COLLECTIVES = ["allreduce", "allgather", "broadcast"]
RESULT = re.compile(r"^RESULT (.*)$")
TARGET_MIN_BYTES = 16 << 20

# The peers of each class, in the order of the table's columns: (impl, transport, column).
# ronde shm is compared with the best shared-memory peer, ronde tcp with the best TCP peer.
SHM_PEERS = [("mpi", "shm", "MPI shm"), ("mpich", "shm", "MPICH shm"),
             ("oneccl", "shm", "oneCCL shm"), ("oneccl", "mpi", "oneCCL mpi")]
TCP_PEERS = [("mpi", "tcp", "MPI tcp"), ("mpich", "tcp", "MPICH tcp"),
             ("oneccl", "tcp", "oneCCL tcp"), ("gloo", "tcp", "Gloo")]
SHORT_NAMES = {"mpi": "OpenMPI", "mpich": "MPICH", "oneccl": "oneCCL", "gloo": "Gloo"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build-bench",
                        help="CMake build directory holding bench/ (default: build-bench)")
    parser.add_argument("--peers-dir", default="build-peers",
                        help="where bench/setup_peers.sh put mpich_bench, ccl_bench and "
                             "peers.json; the MPICH and oneCCL rows run when they are there "
                             "(default: build-peers)")
    parser.add_argument("--ranks", default="2,4", help="comma-separated world sizes")
    parser.add_argument("--sizes", default="4K:256M", help="LOW:HIGH, powers of four")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--trial-seconds", default="0.15")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run everything this many times, interleaved, and report the "
                             "median of the rounds (the machine may be shared)")
    parser.add_argument("--timeout", type=int, default=400, help="seconds per program run")
    parser.add_argument("--priority", type=int, default=-15,
                        help="nice value for the benchmarks, set on a session of their own so "
                             "that it counts against other sessions' jobs (autogroups); 0 "
                             "leaves the priority alone (default: -15)")
    parser.add_argument("--raw", help="append every RESULT line to this file")
    parser.add_argument("--from-raw", nargs="+", metavar="FILE",
                        help="run nothing: lay out the RESULT lines of these --raw files "
                             "(each line counts as one round)")
    parser.add_argument("--markdown", help="write the tables to this file too")
    return parser.parse_args()


def bound(ranks):
    """OpenMPI's own default: one core per rank while they fit, no binding past that."""
    return ranks <= os.cpu_count()


def mpirun_prefix(ranks, btl):
    command = ["mpirun", "-np", str(ranks), "--bind-to", "core" if bound(ranks) else "none",
               "--mca", "pml", "ob1", "--mca", "btl", btl]
    if not bound(ranks):
        command.append("--oversubscribe")
    if btl.endswith("tcp"):
        command += ["--mca", "btl_tcp_if_include", "lo"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return command


def load_peers(peers_dir):
    """What bench/setup_peers.sh left in `peers_dir` (peers.json: the install prefixes), or
    None when it has not run there."""
    path = os.path.join(peers_dir, "peers.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        peers = json.load(f)
    peers["dir"] = peers_dir
    return peers


def mpich_command(peers, ranks, transport):
    """MPICH's own hydra launcher, with its shared memory or its TCP forced.

    shm: ch4's POSIX shared memory between the ranks of a host, with CMA single copy from
    8 KiB (its default, forced here the way the OpenMPI rows keep vader's CMA). The netmod
    (OFI with its tcp provider) only wires the ranks up. tcp: MPIR_CVAR_NOLOCAL=1 makes the
    ranks treat each other as remote, so every byte goes through OFI's tcp provider on lo."""
    env = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo",
           "MPIR_CVAR_CH4_CMA_ENABLE": "1"}
    if transport == "tcp":
        env["MPIR_CVAR_NOLOCAL"] = "1"
    prefix = peers["mpich_prefix"]
    command = [os.path.join(prefix, "bin", "mpiexec"), "-n", str(ranks),
               "-bind-to", "core" if bound(ranks) else "none"]
    return command, env


def ccl_env(peers, transport):
    """oneCCL's transport: its ATL over OFI (libfabric from impi-rt, with its providers).

    shm: CCL_ATL_SHM=1 with FI_PROVIDER=shm, libfabric's shared-memory provider between the
    ranks of a host (CMA for large messages); tcp: the tcp provider on lo. CCL_WORKER_OFFLOAD=0
    makes the calling thread drive the collective: with the default, a oneCCL worker thread per
    rank spins beside the rank's own waiting thread, which on a 2-core machine halves what each
    gets (a short run over tcp: 256 KiB allreduce 80 ms with the workers, 1.1 ms without)."""
    env = {"CCL_ATL_TRANSPORT": "ofi", "FI_PROVIDER_PATH": peers["ccl_lib"],
           "CCL_KVS_IFACE": "lo", "FI_TCP_IFACE": "lo", "CCL_WORKER_OFFLOAD": "0",
           "CCL_LOG_LEVEL": "error"}
    if transport == "shm":
        env.update({"CCL_ATL_SHM": "1", "FI_PROVIDER": "shm"})
    else:
        env.update({"CCL_ATL_SHM": "0", "FI_PROVIDER": "tcp"})
    return env


def ccl_mpi_env(peers):
    """oneCCL's other ATL: MPI, here MPICH's libmpi under MPICH's hydra, so that the bytes
    move through MPICH's shared memory. oneCCL opens libfabric itself before it opens the MPI
    library; it must be MPICH's own (2.5.1), since MPICH's libmpi needs symbols (FABRIC_1.9)
    that impi-rt's libfabric lacks and oneCCL otherwise falls back to Intel MPI's libmpi."""
    prefix = peers["mpich_prefix"]
    return {"CCL_ATL_TRANSPORT": "mpi",
            "CCL_MPI_LIBRARY_PATH": os.path.join(prefix, "lib", "libmpi.so.12"),
            "CCL_OFI_LIBRARY_PATH": os.path.join(prefix, "lib", "mpich", "libfabric.so.1"),
            "CCL_KVS_IFACE": "lo", "CCL_WORKER_OFFLOAD": "0", "CCL_LOG_LEVEL": "error",
            "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo",
            "MPIR_CVAR_CH4_CMA_ENABLE": "1"}


def runs_for(args, bench_dir, ranks, peers):
    """(description, command, extra environment) for every implementation and transport at
    `ranks`, shared-memory ones first, then TCP ones."""
    common = [f"--sizes={args.sizes}", f"--trials={args.trials}",
              f"--trial-seconds={args.trial_seconds}"]
    colls = [f"--collectives={args.collectives}", f"--bind={'core' if bound(ranks) else 'none'}"]
    ronde = os.path.join(bench_dir, "collectives_bench")
    mpi = os.path.join(bench_dir, "mpi_bench")
    gloo = os.path.join(bench_dir, "gloo_bench")
    mpich = os.path.join(peers["dir"], "mpich_bench") if peers else ""
    ccl = os.path.join(peers["dir"], "ccl_bench") if peers else ""
    runs = []
    for transport in ("shm", "tcp"):
        runs.append((f"ronde {transport}", [ronde, f"--ranks={ranks}", f"--transport={transport}"]
                     + common + colls, None))
        if os.path.exists(mpi):
            btl = "self,vader" if transport == "shm" else "self,tcp"
            runs.append((f"MPI {transport}", mpirun_prefix(ranks, btl)
                         + [mpi, f"--transport={transport}"] + common + colls[:1], None))
        if os.path.exists(mpich):
            launcher, env = mpich_command(peers, ranks, transport)
            runs.append((f"MPICH {transport}", launcher + [
                mpich, "--impl=mpich", f"--transport={transport}"] + common + colls[:1], env))
        if os.path.exists(ccl):
            runs.append((f"oneCCL {transport}", [ccl, f"--ranks={ranks}",
                                                 f"--transport={transport}"] + common + colls,
                         ccl_env(peers, transport)))
        if transport == "shm" and os.path.exists(ccl) and os.path.exists(mpich):
            launcher, _ = mpich_command(peers, ranks, "shm")
            runs.append(("oneCCL mpi", launcher + [ccl, f"--store-dir={STORE_DIR}",
                                                   "--transport=mpi"] + common + colls[:1],
                         ccl_mpi_env(peers)))
    if os.path.exists(gloo):
        runs.append(("Gloo", [gloo, f"--ranks={ranks}"] + common + colls, None))
    return runs


def raise_priority(nice):
    """On a shared host other sessions' compilers steal the cores from spinning ranks, and
    the kernel's autogroups make a plain nice count only inside this session: start a
    session of our own and give it (and these processes) the higher priority."""
    if os.getsid(0) != os.getpid():
        try:
            os.setsid()
        except OSError:  # a process group leader cannot: continue in a child that can
            child = os.fork()
            if child:
                _, status = os.waitpid(child, 0)
                sys.exit(os.waitstatus_to_exitcode(status))
            os.setsid()
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
        os.nice(nice - os.nice(0))
    except OSError as e:
        print(f"# could not raise the priority ({e}); timings will share the cores",
              file=sys.stderr)


STORE_DIR = "{STORE_DIR}"  # in a command: a fresh directory for this run only


def run_one(description, command, timeout, raw, env=None):
    """Runs one program, with `env` added to the environment; returns its RESULT lines."""
    if any(STORE_DIR in arg for arg in command):
        store = tempfile.mkdtemp(prefix="ronde_bench_store.")
        try:
            return run_one(description, [arg.replace(STORE_DIR, store) for arg in command],
                           timeout, raw, env)
        finally:
            shutil.rmtree(store, ignore_errors=True)
    shown = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items()))
    print(f"# {description}: {shown + ' ' if shown else ''}{' '.join(command)}", file=sys.stderr,
          flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout,
                              env=dict(os.environ, **env) if env else None)
        stdout, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = "timeout"
    print(f"#   {time.monotonic() - start:.0f} s, exit {code}", file=sys.stderr, flush=True)
    results = []
    for line in stdout.splitlines():
        match = RESULT.match(line)
        if not match:
            continue
        if raw:
            raw.write(line + "\n")
        fields = dict(item.split("=", 1) for item in match.group(1).split())
        results.append(fields)
    return results


def format_size(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def format_time(us):
    if us < 1000:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1e3:.2f} ms"
    return f"{us / 1e6:.2f} s"


def cell(result):
    if result is None:
        return "–"
    return f"{float(result['busbw']):.2f} ({format_time(float(result['us']))})"


def best_peer(peers):
    """The (name, result) of the fastest of `peers` ((name, result or None) pairs) by median
    time, or None."""
    known = [(name, p) for name, p in peers if p is not None]
    return min(known, key=lambda item: float(item[1]["us"])) if known else None


def ratio(ronde, peers):
    """Peer time / ronde time against the best of `peers` (> 1: ronde is faster).

    With several rounds, the median of the per-round ratios: the programs of one round ran
    minutes apart, while the machine's state may change between rounds."""
    peers = [p for p in peers if p is not None]
    if ronde is None or not peers:
        return None
    count = len(ronde["rounds"])
    if count > 1 and all(len(p["rounds"]) == count for p in peers):
        per_round = sorted(min(p["rounds"][i] for p in peers) / ronde["rounds"][i]
                           for i in range(count))
        middle = count // 2
        return per_round[middle] if count % 2 else (per_round[middle - 1] + per_round[middle]) / 2
    best = min(float(p["us"]) for p in peers)
    return best / float(ronde["us"])


def format_ratio(value):
    return "–" if value is None else f"{value:.2f}x"


def present(peers, results):
    """The peers of `peers` that have any result: runs without MPICH or oneCCL (and older
    --raw files) keep the table they always had."""
    found = {(key[0], key[1]) for key in results}
    return [peer for peer in peers if (peer[0], peer[1]) in found]


def ratio_cell(ronde, peers):
    """The ratio against the best of `peers` ((impl, transport, column) with their result),
    naming that peer."""
    best = best_peer([(SHORT_NAMES.get(impl, impl), result) for (impl, _, _), result in peers])
    value = ratio(ronde, [result for _, result in peers])
    return "–" if value is None else f"{value:.2f}x ({best[0]})"


def table(collective, ranks, sizes, results, memcpy):
    def get(impl, transport, size):
        return results.get((impl, transport, collective, ranks, size))

    shm_peers, tcp_peers = present(SHM_PEERS, results), present(TCP_PEERS, results)
    columns = (["size", "ronde shm"] + [c for _, _, c in shm_peers] + ["ratio vs best shm peer",
               "ronde tcp"] + [c for _, _, c in tcp_peers] + ["ratio vs best tcp peer",
                                                              "memcpy GB/s"])
    lines = [
        f"### {collective}, {ranks} ranks",
        "",
        "busbw in GB/s (time per collective), the median round; ratio = peer time / ronde "
        "time against the fastest peer of the class, named (the median of the rounds' ratios), "
        "above 1 means ronde is faster.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---:|" * len(columns),
    ]
    for size in sizes:
        ronde_shm, ronde_tcp = get("ronde", "shm", size), get("ronde", "tcp", size)
        shm = [(peer, get(peer[0], peer[1], size)) for peer in shm_peers]
        tcp = [(peer, get(peer[0], peer[1], size)) for peer in tcp_peers]
        copy = memcpy.get(size)
        copy_cell = f"{float(copy['busbw']):.1f}" if copy else "–"
        row = ([format_size(size), cell(ronde_shm)] + [cell(r) for _, r in shm]
               + [ratio_cell(ronde_shm, shm), cell(ronde_tcp)] + [cell(r) for _, r in tcp]
               + [ratio_cell(ronde_tcp, tcp), copy_cell])
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def targets(ranks, sizes, results):
    """Issue 2's and issue 15's targets for allreduce at `ranks`, each against the best peer
    of its class that ran: (description, met, evidence) rows."""
    def get(impl, transport, size):
        return results.get((impl, transport, "allreduce", ranks, size))

    def shm_peers(s):
        return [get(impl, transport, s) for impl, transport, _ in SHM_PEERS]

    def tcp_peers(s):
        return [get(impl, transport, s) for impl, transport, _ in TCP_PEERS]

    rows = []
    big = [s for s in sizes if s >= TARGET_MIN_BYTES]
    shm = [(s, ratio(get("ronde", "shm", s), shm_peers(s))) for s in big]
    rows.append(("shm, 16 MiB and above: ronde >= 1.5x the best shm peer", shm, 1.5))
    every = [(s, ratio(get("ronde", "shm", s), shm_peers(s) + tcp_peers(s))) for s in sizes]
    rows.append(("every size: ronde (shm) no slower than the best peer", every, 1.0))
    tcp = [(s, ratio(get("ronde", "tcp", s), tcp_peers(s))) for s in big]
    rows.append(("tcp, 16 MiB and above: ronde >= 1.3x the best tcp peer", tcp, 1.3))
    tcp_every = [(s, ratio(get("ronde", "tcp", s), tcp_peers(s))) for s in sizes]
    rows.append(("(extra) tcp, every size: ronde tcp no slower than the best tcp peer",
                 tcp_every, 1.0))
    mid = [s for s in sizes if 256 << 10 <= s <= 16 << 20]
    rows.append(("issue 15: shm, 256 KiB to 16 MiB: ronde >= 1.5x the best shm peer",
                 [(s, ratio(get("ronde", "shm", s), shm_peers(s))) for s in mid], 1.5))
    tcp_mid = [s for s in sizes if 1 << 20 <= s <= 16 << 20]
    rows.append(("issue 15: tcp, 1 to 16 MiB: ronde >= 1.3x the best tcp peer",
                 [(s, ratio(get("ronde", "tcp", s), tcp_peers(s))) for s in tcp_mid], 1.3))

    lines = [f"### Targets, allreduce, {ranks} ranks", "",
             "| target | met | ratios (size: peer time / ronde time) |", "|---|---|---|"]
    for description, pairs, need in rows:
        known = [(s, r) for s, r in pairs if r is not None]
        met = bool(known) and len(known) == len(pairs) and all(r >= need for _, r in known)
        misses = [f"**{format_size(s)}: {r:.2f}x**" if r < need else f"{format_size(s)}: {r:.2f}x"
                  for s, r in known]
        lines.append(f"| {description} | {'met' if met else 'NOT met'} | {', '.join(misses)} |")
    lines.append("")
    return lines


def main():
    args = parse_args()
    bench_dir = os.path.join(args.build_dir, "bench")
    if not args.from_raw and not os.path.exists(os.path.join(bench_dir, "collectives_bench")):
        sys.exit(f"no {bench_dir}/collectives_bench: build the bench targets first")
    ranks_list = [int(r) for r in args.ranks.split(",")]
    peers = None if args.from_raw else load_peers(args.peers_dir)
    if peers is None and not args.from_raw:
        print(f"# no {args.peers_dir}/peers.json: MPICH and oneCCL not run "
              "(bench/setup_peers.sh builds them)", file=sys.stderr)
    if args.priority != 0 and not args.from_raw:
        raise_priority(args.priority)
    raw = open(args.raw, "a") if args.raw else None
    started = time.monotonic()

    rounds = {}  # key -> the RESULT fields of every round
    for path in args.from_raw or []:
        with open(path) as saved:
            for line in saved:
                match = RESULT.match(line.strip())
                if match:
                    fields = dict(item.split("=", 1) for item in match.group(1).split())
                    key = (fields["impl"], fields["transport"], fields["collective"],
                           int(fields["ranks"]), int(fields["bytes"]))
                    rounds.setdefault(key, []).append(fields)
    for round_index in range(0 if args.from_raw else args.repeat):
        print(f"# round {round_index + 1} of {args.repeat}", file=sys.stderr, flush=True)
        runs = [("memcpy", [os.path.join(bench_dir, "memcpy_bench"), f"--sizes={args.sizes}",
                            f"--trials={args.trials}", f"--trial-seconds={args.trial_seconds}"],
                 None)]
        for ranks in ranks_list:
            runs += [(f"{d}, {ranks} ranks", c, e) for d, c, e in runs_for(args, bench_dir, ranks,
                                                                          peers)]
        for description, command, env in runs:
            for fields in run_one(description, command, args.timeout, raw, env):
                key = (fields["impl"], fields["transport"], fields["collective"],
                       int(fields["ranks"]), int(fields["bytes"]))
                rounds.setdefault(key, []).append(fields)
    if raw:
        raw.close()
    # The round with the median time stands for each cell; the times of all rounds, in
    # round order, stay with it for the ratios.
    results = {}
    for key, found in rounds.items():
        by_time = sorted(found, key=lambda fields: float(fields["us"]))
        results[key] = dict(by_time[(len(found) - 1) // 2],
                            rounds=[float(fields["us"]) for fields in found])
    memcpy = {key[4]: fields for key, fields in results.items() if key[0] == "memcpy"}
    results = {key: fields for key, fields in results.items() if key[0] != "memcpy"}

    sizes = sorted({key[4] for key in results} | set(memcpy))
    median_of = f"median of {max(len(found) for found in rounds.values())} round(s)"
    if args.from_raw:
        header = f"Laid out from {', '.join(args.from_raw)}: {median_of}."
    else:
        header = (f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
                  f"{time.monotonic() - started:.0f} s, {os.cpu_count()} CPUs, {median_of}, "
                  f"load average at the end {os.getloadavg()[0]:.1f}.")
    lines = [header, ""]
    for ranks in ranks_list:
        for collective in args.collectives.split(","):
            lines += table(collective, ranks, sizes, results, memcpy)
    for ranks in ranks_list:
        lines += targets(ranks, sizes, results)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
