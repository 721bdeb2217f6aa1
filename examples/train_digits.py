#!/usr/bin/env python3
"""Trains a small MLP on the handwritten digits that scikit-learn ships (1,797 8x8 images).

One process:     python3 examples/train_digits.py
Two processes:   ronde run -np 2 python3 examples/train_digits.py

The distributed parts are the Horovod recipe: init, pin threads, shard the data by rank,
scale the learning rate by the number of ranks, wrap the optimizer, broadcast the initial
state from rank 0, checkpoint on rank 0 only, average the metrics across ranks.
"""

import argparse
import gzip
import os
import sys
import time

# Ranks sharing a host must not oversubscribe its cores: pin BLAS before torch loads it.
_local_size = int(os.environ.get("RONDE_LOCAL_SIZE", os.environ.get("HOROVOD_LOCAL_SIZE", "1")))
_threads = max(1, (os.cpu_count() or 1) // max(1, _local_size))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(_threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ronde.torch as hvd  # noqa: E402



def digits_path():
    """scikit-learn's copy of the digits data: this interpreter's sklearn, else Debian's."""
    import importlib.util
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        found = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                             "digits.csv.gz")
        if os.path.exists(found):
            return found
    return "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def load_digits(path, test_fraction=0.2, seed=0):
    """The data set split the same way on every rank: (train_x, train_y, test_x, test_y)."""
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def progress(epoch, epochs, done, total, text=""):
    width = 24
    filled = int(width * done / max(total, 1))
    bar = "#" * filled + "." * (width - filled)
    return "epoch %2d/%d [%s] %3d%% %s" % (epoch, epochs, bar, 100 * done // max(total, 1), text)


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y, reduction="sum").item()
        correct = (logits.argmax(1) == y).sum().item()
    model.train()
    return loss, correct


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--checkpoint", default="/tmp/ronde_digits.pt")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--data", default=digits_path())
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--compression", default="none",
                        choices=["none", "fp16", "bf16", "topk", "powersgd"],
                        help="gradients on the wire (topk and powersgd with error feedback)")
    parser.add_argument("--topk-ratio", type=float, default=0.01,
                        help="share of each gradient's entries top-k sends")
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--min-accuracy", type=float, default=0.95,
                        help="exit status 1 below this final test accuracy")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    return parser.parse_args(argv)


def main():
    args = parse_args()
    hvd.init()
    test_accuracy = train(args)
    hvd.shutdown()
    return 0 if test_accuracy >= args.min_accuracy else 1


def train(args):
    """Trains in the job hvd.init() joined; returns the final test accuracy (every rank)."""
    torch.set_num_threads(_threads)
    torch.manual_seed(args.seed + hvd.rank())  # different on purpose: the broadcast fixes it
    verbose = hvd.rank() == 0 and not args.quiet

    train_x, train_y, test_x, test_y = load_digits(args.data)
    # Shard: rank r takes every size-th example; the shards together are the training set.
    shard_x, shard_y = train_x[hvd.rank()::hvd.size()], train_y[hvd.rank()::hvd.size()]
    steps_per_epoch = -(-len(train_x) // (args.batch_size * hvd.size()))

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    start_epoch = 0
    if args.resume and hvd.rank() == 0 and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_epoch = saved["epoch"]
    start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
                   "bf16": hvd.Compression.bf16,
                   "topk": hvd.Compression.topk(ratio=args.topk_ratio),
                   "powersgd": hvd.Compression.powersgd(rank=args.powersgd_rank)}[args.compression]
    if args.fp16_allreduce:
        compression = hvd.Compression.fp16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    if verbose:
        print("training on %d rank(s): %d train / %d test examples, %d steps per epoch"
              % (hvd.size(), len(train_x), len(test_x), steps_per_epoch), flush=True)
    tty = sys.stdout.isatty()
    steps_run, step_seconds = 0, 0.0
    generator = torch.Generator().manual_seed(args.seed)
    test_accuracy = 0.0
    for epoch in range(start_epoch + 1, args.epochs + 1):
        began = time.time()
        order = torch.randperm(len(shard_y), generator=generator)
        loss_sum, seen = 0.0, 0
        for step in range(steps_per_epoch):
            # Every rank runs the same number of steps (shards differ by at most one example).
            batch = order[(step * args.batch_size) % len(order):][:args.batch_size]
            x, y = shard_x[batch], shard_y[batch]
            step_began = time.perf_counter()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step_seconds += time.perf_counter() - step_began
            steps_run += 1
            loss_sum += loss.item() * len(y)
            seen += len(y)
            if verbose and tty:
                print("\r" + progress(epoch, args.epochs, step + 1, steps_per_epoch), end="",
                      flush=True)

        # Metrics averaged over ranks; the test set is sharded for evaluation too.
        test_loss, correct = evaluate(model, test_x[hvd.rank()::hvd.size()],
                                      test_y[hvd.rank()::hvd.size()])
        totals = hvd.allreduce(torch.tensor([loss_sum, seen, test_loss, correct],
                                            dtype=torch.float64), op=hvd.Sum, name="metrics")
        train_loss = totals[0].item() / totals[1].item()
        test_accuracy = totals[3].item() / len(test_y)
        if verbose:
            line = progress(epoch, args.epochs, steps_per_epoch, steps_per_epoch,
                            "loss %.4f  test loss %.4f  test accuracy %.2f%%  (%.2fs)"
                            % (train_loss, totals[2].item() / len(test_y), 100 * test_accuracy,
                               time.time() - began))
            print(("\r" if tty else "") + line, flush=True)
        if hvd.rank() == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, args.checkpoint)

    # Every rank holds the same parameters; say so, and report the final accuracy.
    digest = hvd.allgather(torch.tensor([sum(p.double().sum().item()
                                             for p in model.parameters())]))
    if verbose:
        same = bool(torch.allclose(digest, digest[0].expand_as(digest)))
        print("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s"
              % (100 * test_accuracy, hvd.size(), same), flush=True)
        print("compression %s: %d gradient bytes sent per step per rank, %.3f ms per step"
              % (args.compression, wire_bytes_per_step(model, compression, steps_run),
                 1000.0 * step_seconds / max(steps_run, 1)), flush=True)
    return test_accuracy


def wire_bytes_per_step(model, compression, steps):
    """What this rank hands to the collectives for the gradients, per step."""
    if hvd.size() == 1:
        return 0
    if hasattr(compression, "bytes_sent"):
        return compression.bytes_sent // max(steps, 1)
    return sum(compression.compress(p.grad)[0].numel() * compression.compress(p.grad)[0]
               .element_size() for p in model.parameters())


if __name__ == "__main__":
    sys.exit(main())
