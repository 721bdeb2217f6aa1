#!/usr/bin/env python3
"""Where a training step's communication time goes, from a ronde timeline (RONDE_TIMELINE):
per activity (NEGOTIATE_ALLREDUCE, ALLREDUCE around QUEUE, MEMCPY_IN_FUSION_BUFFER,
RONDE_ALLREDUCE and MEMCPY_OUT_FUSION_BUFFER: Horovod's names),
the total span time per step and the span count per step, over the cycles in the file.

    RONDE_TIMELINE=/tmp/tl.json ronde run -np 2 --bind-to core python \\
        bench/torch_training_bench.py --worker --mode ronde --model mlp --steps 100
    python bench/timeline_breakdown.py /tmp/tl.json --steps 130   # warm-up steps included

Spans of different tensors overlap (one fused allreduce shows on every tensor's row), so an
activity's "busy" column is the union of its spans: the wall time during which at least one
tensor was in that activity.
"""

import argparse
import collections
import json


def load(path):
    text = open(path).read().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return json.loads(text)


def union_us(intervals):
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("--steps", type=int, required=True, help="training steps in the file")
    args = parser.parse_args()
    spans = collections.defaultdict(list)
    cycles = 0
    first, last = None, None
    for event in load(args.timeline):
        if event.get("ph") == "X":
            start, stop = event["ts"], event["ts"] + event["dur"]
            spans[event["name"]].append((start, stop))
            first = start if first is None else min(first, start)
            last = stop if last is None else max(last, stop)
        elif event.get("ph") == "i" and event.get("name") == "CYCLE_START":
            cycles += 1
    print("%d steps over %.1f ms of timeline, %d cycle markers" % (
        args.steps, (last - first) / 1e3 if first is not None else 0, cycles))
    print("%-28s %10s %14s %14s" % ("activity", "spans/step", "sum us/step", "busy us/step"))
    for name in sorted(spans, key=lambda n: -union_us(spans[n])):
        intervals = spans[name]
        print("%-28s %10.1f %14.1f %14.1f" % (
            name, len(intervals) / args.steps, sum(b - a for a, b in intervals) / args.steps,
            union_us(intervals) / args.steps))


if __name__ == "__main__":
    main()
