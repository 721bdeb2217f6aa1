#!/usr/bin/env python3
"""Elastic training of the digits MLP: workers may die or join while training goes on.

    ronde run -np 4 --min-np 2 --max-np 4 --host-discovery-script ./discover_hosts.sh \\
        python3 examples/elastic_train_digits.py

The script prints "host:slots" lines (e.g. "localhost:4"). Kill a worker and the others
roll back to their last commit, re-form without it and go on; when discovery offers a slot
again a new worker starts, receives the state from a survivor and joins at the next commit.
See docs/elastic.md.

Lines starting with "elastic:" are for tests and benchmarks (tests/elastic/).
"""

import argparse
import os
import sys
import time

# Ranks sharing a host must not oversubscribe its cores: pin BLAS before torch loads it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ronde.torch as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import Net, digits_path, evaluate, load_digits  # noqa: E402


def log(*parts):
    print("elastic:", *parts, "t=%.3f" % time.time(), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1, help="for the whole batch of 4 ranks")
    parser.add_argument("--commit-every", type=int, default=5, help="steps between commits")
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds of pretend extra compute per step (tests)")
    parser.add_argument("--data", default=digits_path())
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234)  # the same start everywhere; sync makes it so anyway
    train_x, train_y, test_x, test_y = load_digits(args.data)
    dataset = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = Net()
    # The learning rate is fixed for the global batch of 4 ranks and rescaled at every reset:
    # the step size per sample stays the same whatever the world's size.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def scale_lr():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size() / 4

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                                   batch=0, step=0)
    state.register_reset_callbacks([scale_lr])
    scale_lr()

    @hvd.elastic.run
    def train(state):
        log("synced pid=%d worker=%s rank=%d size=%d step=%d epoch=%d"
            % (os.getpid(), os.environ.get("RONDE_ELASTIC_WORKER_ID", "-"), hvd.rank(),
               hvd.size(), state.step, state.epoch))
        first_step = True
        while state.epoch < args.epochs:
            if state.batch == 0:
                sampler.set_epoch(state.epoch)  # a fresh epoch, not one resumed after a reset
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                if args.step_delay:
                    time.sleep(args.step_delay)
                sampler.record_batch(i, args.batch_size)
                state.batch += 1
                state.step += 1
                if first_step:
                    log("first step pid=%d rank=%d size=%d step=%d"
                        % (os.getpid(), hvd.rank(), hvd.size(), state.step))
                    first_step = False
                if state.step % args.commit_every == 0:
                    if hvd.rank() == 0:
                        log("commit step=%d epoch=%d size=%d" % (state.step, state.epoch,
                                                                 hvd.size()))
                    state.commit()
            state.epoch += 1
            state.batch = 0
            state.commit()

    train(state)

    _, correct = evaluate(model, test_x, test_y)
    accuracy = correct / len(test_y)
    digest = hvd.allgather(torch.tensor([sum(p.double().sum().item()
                                             for p in model.parameters())]))
    same = bool(torch.equal(digest, digest[0].expand_as(digest)))
    log("done pid=%d rank=%d size=%d step=%d accuracy=%.4f identical=%s digest=%.12f"
        % (os.getpid(), hvd.rank(), hvd.size(), state.step, accuracy, same,
           digest[hvd.rank()].item()))
    hvd.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
