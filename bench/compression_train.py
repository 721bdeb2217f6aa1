"""One rank of the compression benchmark: trains an MLP whose gradients are tens of MB with a
given gradient compression, in ronde or in torch DDP (gloo), and prints one result line.

  ronde run -np 2 -H a:1,b:1 python bench/compression_train.py --method ronde-powersgd
  RANK=.. WORLD_SIZE=2 MASTER_ADDR=.. MASTER_PORT=.. python bench/compression_train.py \
      --method ddp-powersgd

Data are synthetic and the same for every method: a seeded mixture of Gaussians, one per
class; each rank draws its own batches (its seed includes the rank). The first --warmup steps
are not timed. The final loss is the mean cross entropy of the trained model on a held-out
set, the same set for every method.
"""
import argparse
import time

import torch
import torch.nn.functional as F

METHODS = ["ronde-none", "ronde-fp16", "ronde-bf16", "ronde-topk", "ronde-powersgd",
           "ddp-none", "ddp-powersgd"]


def make_model(width, depth, inputs, classes):
    torch.manual_seed(0)
    layers, size = [], inputs
    for _ in range(depth):
        layers += [torch.nn.Linear(size, width), torch.nn.ReLU()]
        size = width
    layers.append(torch.nn.Linear(size, classes))
    return torch.nn.Sequential(*layers)


class Data:
    """A mixture of Gaussians, one per class, close enough to each other that the classes
    take some tens of steps to separate: a loss that moves within a short benchmark."""

    def __init__(self, inputs, classes, spread=0.2):
        means = torch.Generator().manual_seed(1234)
        self.means = spread * torch.randn(classes, inputs, generator=means)

    def batch(self, seed, rows):
        generator = torch.Generator().manual_seed(seed)
        y = torch.randint(self.means.shape[0], (rows,), generator=generator)
        return self.means[y] + torch.randn(rows, self.means.shape[1], generator=generator), y


def ronde_setup(model, method, args):
    import ronde.torch as hvd
    hvd.init()
    compression = {"ronde-none": hvd.Compression.none, "ronde-fp16": hvd.Compression.fp16,
                   "ronde-bf16": hvd.Compression.bf16,
                   "ronde-topk": hvd.Compression.topk(ratio=args.topk_ratio),
                   "ronde-powersgd": hvd.Compression.powersgd(rank=args.powersgd_rank)}[method]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr,
                                                         momentum=0.9),
                                         named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return model, optimizer, hvd.rank(), hvd.size(), hvd.barrier, hvd.shutdown, compression


def ddp_setup(model, method, args):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    dist.init_process_group("gloo")
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    if method == "ddp-powersgd":
        # start_powerSGD_iter: the smallest DDP allows with error feedback (it runs plain
        # allreduce before), so every timed step is compressed.
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=2, use_error_feedback=True,
                                            warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    return ddp, optimizer, dist.get_rank(), dist.get_world_size(), dist.barrier, \
        dist.destroy_process_group, None


def planned_wire_bytes(method, parameters, args):
    """Bytes one rank hands to the collectives per step, from the compressors' rules: casts
    halve float32; top-k sends k values + k int32 indices of tensors with >= 1024 entries;
    PowerSGD (ronde's and DDP's hook alike) sends r(n+m) floats for a matrix whose factors are
    smaller, everything else whole."""
    total = 0
    for p in parameters:
        numel, whole = p.numel(), p.numel() * p.element_size()
        if method.endswith(("fp16", "bf16")):
            total += numel * 2
        elif method.endswith("topk") and numel >= 1024:
            total += -(-int(args.topk_ratio * numel * 1e6) // 1000000) * (4 + 4)
        elif method.endswith("powersgd") and p.dim() >= 2:
            n, m = p.shape[0], numel // p.shape[0]
            r = min(args.powersgd_rank, n, m)
            total += 4 * r * (n + m) if r * (n + m) < n * m else whole
        else:
            total += whole
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=2, help="hidden layers")
    parser.add_argument("--inputs", type=int, default=1024)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32, help="rows per rank and step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--topk-ratio", type=float, default=0.01)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket size")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model = make_model(args.width, args.depth, args.inputs, args.classes)
    setup = ronde_setup if args.method.startswith("ronde") else ddp_setup
    model, optimizer, rank, size, barrier, shutdown, compression = setup(model, args.method,
                                                                         args)
    data = Data(args.inputs, args.classes)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def step(index):
        x, y = data.batch(1000003 * (rank + 1) + index, args.batch)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for index in range(args.warmup):
        step(index)
    barrier()
    began = time.perf_counter()
    for index in range(args.warmup, args.warmup + args.steps):
        step(index)
    barrier()
    seconds = time.perf_counter() - began
    with torch.no_grad():
        x, y = data.batch(7, 2048)
        loss = F.cross_entropy(model(x), y).item()
    wire = planned_wire_bytes(args.method, model.parameters(), args)
    if hasattr(compression, "bytes_sent"):  # what ronde's reducing compressors counted
        wire = compression.bytes_sent // (args.warmup + args.steps)
    if rank == 0:
        print("result method=%s ranks=%d gradient_mb=%.1f wire_mb=%.3f steps_per_s=%.3f "
              "final_loss=%.4f" % (args.method, size, gradient_bytes / 1e6, wire / 1e6,
                                   args.steps / seconds, loss), flush=True)
    shutdown()


if __name__ == "__main__":
    main()
