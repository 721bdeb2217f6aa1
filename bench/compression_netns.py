#!/usr/bin/python3
"""Gradient compression on a tc-shaped link: ronde's compressors against torch DDP's PowerSGD.

Makes 2 namespace hosts whose links are capped at --rate each way (bench/netns/shaped_links.py),
one rank on each, and trains the MLP of bench/compression_train.py (default 1024-2048-2048-16,
6.3M parameters, 25 MB of float32 gradients) with each method: ronde none / fp16 / bf16 /
topk / powersgd (`ronde run -H`, over ssh into the hosts), and torch DDP over gloo without and
with its PowerSGD communication hook at the same PowerSGD rank (started in the hosts with
`ip netns exec`). Rounds are interleaved (every method once per round, the order rotated each
round) so that a change of load on a shared machine falls on all methods alike; the table gives
medians over the rounds and the load average before and after.

  sudo .venv/bin/python bench/compression_netns.py [--rounds 3] [--rate 1gbit]

Needs root (namespaces, tc), openssh-server and a python with torch and ronde installed (the
one running this script, by default). Hosts, qdiscs and sshd are removed on exit.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "netns"))

from shaped_links import CannotMakeHosts, ShapedHosts  # noqa: E402

WORKER = os.path.join(HERE, "compression_train.py")
RESULT = re.compile(r"result method=(\S+) ranks=(\d+) gradient_mb=([\d.]+) wire_mb=([\d.]+) "
                    r"steps_per_s=([\d.]+) final_loss=([\d.]+)")
METHODS = ["ronde-none", "ronde-fp16", "ronde-bf16", "ronde-topk", "ronde-powersgd",
           "ddp-none", "ddp-powersgd"]
# A loaded machine must not turn a slow rank into a lost one.
SETTINGS = {"RONDE_LIVENESS_TIMEOUT_SECONDS": "300", "OPENBLAS_NUM_THREADS": "1"}


def log(*parts):
    print("#", *parts, file=sys.stderr, flush=True)


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def ronde_command(hosts, python, method, worker_args):
    ronde = os.path.join(os.path.dirname(python), "ronde")
    host_list = ",".join("%s:1" % a for a in hosts.addresses[:2])
    exported = []
    for name in SETTINGS:
        exported += ["-x", name]
    return ([ronde, "run"] + hosts.hosts.ssh_args() + exported +
            ["-np", "2", "-H", host_list, python, WORKER, "--method", method] + worker_args)


def run_ddp(hosts, python, method, worker_args, port, timeout):
    """Both DDP ranks, each in its host's namespace; rank 0's output."""
    env_common = ["MASTER_ADDR=%s" % hosts.addresses[0], "MASTER_PORT=%d" % port,
                  "WORLD_SIZE=2", "GLOO_SOCKET_IFNAME=eth0"] + \
        ["%s=%s" % kv for kv in SETTINGS.items()]
    ranks = []
    for rank, namespace in enumerate(hosts.hosts.namespaces[:2]):
        command = (["ip", "netns", "exec", namespace, "env", "RANK=%d" % rank] + env_common +
                   [python, WORKER, "--method", method] + worker_args)
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    try:
        for process in ranks:
            outputs.append(process.communicate(timeout=timeout)[0])
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    if any(p.returncode != 0 for p in ranks):
        raise RuntimeError("%s failed:\n%s" % (method, "\n".join(o[-3000:] for o in outputs)))
    return outputs[0]


def run_method(hosts, python, method, worker_args, port, timeout):
    if method.startswith("ddp"):
        out = run_ddp(hosts, python, method, worker_args, port, timeout)
    else:
        env = dict(os.environ, **SETTINGS)
        done = subprocess.run(ronde_command(hosts, python, method, worker_args), env=env,
                              capture_output=True, text=True, timeout=timeout)
        out = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError("%s failed:\n%s" % (method, out[-3000:]))
    found = RESULT.search(out)
    if found is None:
        raise RuntimeError("%s printed no result:\n%s" % (method, out[-3000:]))
    return {"gradient_mb": float(found.group(3)), "wire_mb": float(found.group(4)),
            "steps_per_s": float(found.group(5)), "final_loss": float(found.group(6))}


def print_table(args, results, loads):
    print("%s each way between 2 namespace hosts, 1 rank each; %d rounds (interleaved), "
          "%d timed steps of %d rows per rank; load average %.1f before, %.1f after"
          % (args.rate, args.rounds, args.steps, args.batch, loads[0], loads[-1]))
    print()
    print("| method | gradient MB | on the wire MB/step/rank | steps/s (median) | "
          "min-max | final loss (median) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for method in args.methods:
        runs = results[method]
        if not runs:
            print("| %s | failed | | | | |" % method)
            continue
        rates = [r["steps_per_s"] for r in runs]
        print("| %s | %.1f | %.3f | %.3f | %.3f-%.3f | %.4f |"
              % (method, runs[0]["gradient_mb"], runs[0]["wire_mb"], statistics.median(rates),
                 min(rates), max(rates), statistics.median(r["final_loss"] for r in runs)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with torch and ronde; its directory holds `ronde`")
    parser.add_argument("--rate", default="1gbit", help="tc rate of each host's link, each way")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--topk-ratio", type=float, default=0.01)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = parser.parse_args()
    args.methods = args.methods.split(",")
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        sys.exit("compression_netns: unknown methods %s" % ", ".join(sorted(unknown)))
    worker_args = ["--steps", str(args.steps), "--batch", str(args.batch),
                   "--width", str(args.width), "--depth", str(args.depth),
                   "--powersgd-rank", str(args.powersgd_rank),
                   "--topk-ratio", str(args.topk_ratio)]

    def stop(signum, frame):  # SIGTERM/SIGHUP unwind through the finally below
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    try:
        hosts = ShapedHosts(2, args.rate)
    except CannotMakeHosts as why:
        sys.exit("compression_netns: cannot make namespace hosts: %s" % why)
    results = {m: [] for m in args.methods}
    loads = [load_average()]
    try:
        log(hosts.describe())
        port = 29600
        for round_index in range(args.rounds):
            shift = round_index % len(args.methods)
            for method in args.methods[shift:] + args.methods[:shift]:
                port += 1
                began = time.time()
                try:
                    result = run_method(hosts, args.python, method, worker_args, port,
                                        args.timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as why:
                    log("round %d %s: %s" % (round_index, method, why))
                    continue
                results[method].append(result)
                log("round %d %s: %.3f steps/s, loss %.4f (%.0f s, load %.1f)"
                    % (round_index, method, result["steps_per_s"], result["final_loss"],
                       time.time() - began, load_average()))
        loads.append(load_average())
    finally:
        hosts.close()
    print_table(args, results, loads)


if __name__ == "__main__":
    main()
