#!/usr/bin/env python3
"""What one ronde.torch allreduce_async_ call costs its caller (the submission, not the
reduction), measured two ways:

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="allreduce_async_ calls")
    parser.add_argument("--batch", type=int, default=100, help="calls between synchronizes")
    parser.add_argument("--elements", type=int, default=4096, help="float32s per tensor")
    parser.add_argument("--callgrind", action="store_true",
                        help="under callgrind --instr-atstart=no: instrument the loop only")
    args = parser.parse_args()

    import torch
    import ronde.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    tensors = [torch.ones(args.elements) for _ in range(args.batch)]
    names = ["grad.%d" % i for i in range(args.batch)]
    per_call = []
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
    for _ in range(max(1, args.calls // args.batch)):
        began = time.perf_counter_ns()
        handles = [hvd.allreduce_async_(t, name=n) for t, n in zip(tensors, names)]
        per_call.append((time.perf_counter_ns() - began) / args.batch)
        for h in handles:
            hvd.synchronize(h)
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)
    else:
        print("allreduce_async_: %.2f us per call (median of %d batches of %d)"
              % (statistics.median(per_call) / 1e3, len(per_call), args.batch))
    hvd.shutdown()


if __name__ == "__main__":
    main()
