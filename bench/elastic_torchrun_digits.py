#!/usr/bin/env python3
"""The elastic digits job the torchrun way, for bench/elastic_recovery.py: the same MLP, data
and schedule as examples/elastic_train_digits.py, on torch.distributed (gloo). torchrun
restarts every worker when one dies; the job resumes from its last checkpoint on disk,
written by rank 0 every --commit-every steps (torchrun's own recommendation)."""

import argparse
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_digits import Net, digits_path, load_digits  # noqa: E402


def log(*parts):
    print("elastic:", *parts, "t=%.3f" % time.time(), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--commit-every", type=int, default=4)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    train_x, train_y, _, _ = load_digits(digits_path())
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size / 4, momentum=0.9)
    step, epoch = 0, 0
    if os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, epoch = saved["step"], saved["epoch"]
    for p in model.state_dict().values():
        dist.broadcast(p, 0)
    log("synced pid=%d rank=%d size=%d step=%d" % (os.getpid(), rank, size, step))
    steps_per_epoch = -(-len(train_x) // (args.batch_size * size))
    first = True
    while epoch < args.epochs:
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(7 + epoch))
        shard = order[rank::size]
        for i in range(max(0, step - epoch * steps_per_epoch), steps_per_epoch):
            batch = shard[i * args.batch_size:(i + 1) * args.batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= size
            optimizer.step()
            if args.step_delay:
                time.sleep(args.step_delay)
            step += 1
            if first:
                log("first step pid=%d rank=%d size=%d step=%d" % (os.getpid(), rank, size, step))
                first = False
            if step % args.commit_every == 0 and rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "step": step, "epoch": epoch}, args.checkpoint + ".tmp")
                os.replace(args.checkpoint + ".tmp", args.checkpoint)
                log("commit step=%d size=%d" % (step, size))
        epoch += 1
    log("done pid=%d rank=%d step=%d" % (os.getpid(), rank, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
