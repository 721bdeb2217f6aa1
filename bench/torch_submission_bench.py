#!/usr/bin/env python3
"""What a ronde.torch call costs its caller per tensor, the submission and (for the
gathering calls) the adoption of its outputs, not the collective, measured two ways:

  `--call allreduce_async_` (default): the submission alone, synchronized outside the timed
  part; `--call grouped_reducescatter`, `grouped_allgather`, `grouped_allreduce_` (one group
  of `--batch` tensors) and `reducescatter_async` (`--batch` calls, then their synchronizes):
  the whole call, the wait included, per tensor; under callgrind the main thread's
  instructions leave the wait (done on the runtime's thread) out.

  - time: time.perf_counter_ns around batches of `--batch` calls, the runtime's queue
    drained (synchronize) between batches and outside the timed part; median per call;
  - instructions: run it under valgrind --tool=callgrind --separate-threads=yes twice, with
    `--calls` N and 2N, and subtract the main thread's totals (no hardware counters on this
    machine's VMs, and instruction counts do not care about the neighbours' compiles):

    python bench/torch_submission_bench.py --calls 20000            # per-call time
    valgrind --tool=callgrind --separate-threads=yes --instr-atstart=no \\
        --callgrind-out-file=cg.%p python bench/torch_submission_bench.py --calls 2000 \\
        --callgrind   # instruments only the loop (callgrind_control -i on/off), so torch's
                      # import costs no instrumented time; then --calls 4000

One rank (no launcher needed): the cost of a call does not depend on the peers, and one rank
keeps the other core free for the runtime's thread.
"""

import argparse
import os
import statistics
import subprocess
import time


def _submissions(hvd, tensors, names):
    handles = [hvd.allreduce_async_(t, name=n) for t, n in zip(tensors, names)]
    return lambda: [hvd.synchronize(h) for h in handles]


def _scatters(hvd, tensors, names):
    handles = [hvd.reducescatter_async(t, name=n, op=hvd.Sum) for t, n in zip(tensors, names)]
    for h in handles:
        hvd.synchronize(h)
    return lambda: None


def _whole(call):
    def batch(hvd, tensors, names):
        call(hvd, tensors)
        return lambda: None
    return batch


# What one timed batch runs; it returns what must still run untimed.
BATCHES = {
    "allreduce_async_": _submissions,
    "reducescatter_async": _scatters,
    "grouped_reducescatter": _whole(
        lambda hvd, ts: hvd.grouped_reducescatter(ts, name="shards", op=hvd.Sum)),
    "grouped_allgather": _whole(lambda hvd, ts: hvd.grouped_allgather(ts, name="gathered")),
    "grouped_allreduce_": _whole(
        lambda hvd, ts: hvd.grouped_allreduce_(ts, name="grads", op=hvd.Sum)),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call", default="allreduce_async_", choices=[
        "allreduce_async_", "reducescatter_async", "grouped_reducescatter", "grouped_allgather",
        "grouped_allreduce_"])
    parser.add_argument("--calls", type=int, default=20000, help="tensors submitted in all")
    parser.add_argument("--peer", action="store_true",
                        help="Horovod (horovod.torch, one rank) instead of ronde.torch, with "
                             "the same calls")
    parser.add_argument("--batch", type=int, default=100, help="calls between synchronizes")
    parser.add_argument("--elements", type=int, default=4096, help="float32s per tensor")
    parser.add_argument("--callgrind", action="store_true",
                        help="under callgrind --instr-atstart=no: instrument the loop only")
    args = parser.parse_args()

    import torch
    if args.peer:
        import horovod.torch as hvd
    else:
        import ronde.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    tensors = [torch.ones(args.elements) for _ in range(args.batch)]
    names = ["grad.%d" % i for i in range(args.batch)]
    per_call = []
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
    batch = BATCHES[args.call]
    for _ in range(max(1, args.calls // args.batch)):
        began = time.perf_counter_ns()
        sync = batch(hvd, tensors, names)
        per_call.append((time.perf_counter_ns() - began) / args.batch)
        sync()
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
    else:
        print("%s: %.2f us per tensor (median of %d batches of %d)"
              % (args.call, statistics.median(per_call) / 1e3, len(per_call), args.batch))
    hvd.shutdown()


if __name__ == "__main__":
    main()
