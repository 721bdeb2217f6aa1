"""ronde.torch on CUDA tensors on the lent GPU machine: every collective x dtype x op against a
CPU reference computed here from every rank's inputs.

Run by scripts/device_check.sh as `ronde run -np 2 python3 tests/gpu/torch_staging_check.py`
(both ranks share the one GPU, host-staged: RONDE_GPU_OPERATIONS=host, the default here), and
with RONDE_GPU_OPERATIONS=nccl under `ronde run -np 1` (NCCL will not put two ranks on one GPU).
Inputs are produced on torch's current stream behind torch.cuda._sleep, and results are read
with no synchronisation beyond what ronde promises (the output is ready on the caller's stream
when the handle completes), so a runtime that read inputs early or finished before its copies
would fail here. The same on a side stream, not torch's default one. Exit status 0: all passed.
"""
import os
import sys

import torch

import ronde.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
       "product": hvd.Product}


def values(rank, n, dtype, salt):
    """Small integers every dtype holds exactly, different per rank and tensor."""
    i = torch.arange(n, dtype=torch.int64)
    v = (rank * 5 + i * 3 + salt * 2) % 7
    if dtype == torch.bool:
        return (v % 3 == 0)
    if dtype == torch.uint8:
        return v.to(dtype)
    return (v - 3).to(dtype)


def reference(op, inputs, dtype):
    stack = torch.stack([t.to(torch.float64) for t in inputs])
    if op == "sum" or op == "average":
        out = stack.sum(0)
        if dtype == torch.bool:
            out = (out != 0).to(torch.float64)
        if op == "average":
            out = out / len(inputs)
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    else:
        out = stack.prod(0)
        if dtype == torch.bool:
            out = (out != 0).to(torch.float64)
    if not dtype.is_floating_point and dtype != torch.bool:
        out = torch.trunc(out)
    return out


def late(tensor_cpu, device):
    """`tensor_cpu` copied to the GPU on the current stream, behind ~10 ms of GPU sleep."""
    torch.cuda._sleep(10_000_000)
    return tensor_cpu.pin_memory().to(device, non_blocking=True)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    assert hvd.cuda_built(), "this ronde was built without CUDA"
    failures = []

    def expect(name, got, want):
        got = got.cpu().to(torch.float64)  # on the current stream: ordered after ronde's copies
        want = want.to(torch.float64)
        if got.shape != want.shape:
            failures.append("%s: shape %s, want %s" % (name, list(got.shape), list(want.shape)))
        elif not torch.equal(got, want):
            bad = (got != want).flatten().nonzero().flatten()[:3].tolist()
            failures.append("%s: differs at flat indices %s (got %s, want %s)" % (
                name, bad, got.flatten()[bad].tolist(), want.flatten()[bad].tolist()))

    n = 70000  # several 64 KiB staging chunks for every dtype
    salt = 0
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            if dtype == torch.bool and op_name == "average":
                continue
            if dtype == torch.int16 and op_name == "product":
                continue
            salt += 1
            inputs = [values(r, n, dtype, salt) for r in range(size)]
            want = reference(op_name, inputs, dtype)
            mine = late(inputs[rank], device)
            expect("allreduce %s %s" % (dtype, op_name),
                   hvd.allreduce(mine, op=op, name="ar.%d" % salt), want)
            inplace = late(inputs[rank], device)
            hvd.synchronize(hvd.allreduce_async_(inplace, op=op, name="ari.%d" % salt))
            expect("allreduce_ %s %s" % (dtype, op_name), inplace, want)
            group = [late(inputs[rank][:k + 5], device) for k in range(4)]
            outs = hvd.grouped_allreduce(group, op=op, name="gar.%d" % salt)
            for k, out in enumerate(outs):
                expect("grouped_allreduce %s %s #%d" % (dtype, op_name, k), out, want[:k + 5])
        if dtype.is_floating_point:
            inputs = [values(r, n, dtype, 99) for r in range(size)]
            want = reference("sum", inputs, dtype) * 1.5
            out = hvd.allreduce(late(inputs[rank], device), op=hvd.Sum, prescale_factor=0.5,
                                postscale_factor=3.0, name="scaled.%s" % dtype)
            expect("allreduce %s scaled" % dtype, out, want)

        # Allgather with uneven first dimensions, broadcast, alltoall, reducescatter.
        rows = [300 + r for r in range(size)]
        parts = [values(r, rows[r] * 3, dtype, 7).reshape(rows[r], 3) for r in range(size)]
        expect("allgather %s" % dtype,
               hvd.allgather(late(parts[rank], device), name="ag.%s" % dtype), torch.cat(parts))
        b = late(values(rank, 5000, dtype, 8), device)
        hvd.broadcast_(b, root_rank=size - 1, name="bc.%s" % dtype)
        expect("broadcast %s" % dtype, b, values(size - 1, 5000, dtype, 8))
        sends = [values(r, size * 40 * 2, dtype, 9).reshape(size * 40, 2) for r in range(size)]
        got = hvd.alltoall(late(sends[rank], device), name="a2a.%s" % dtype)
        want = torch.cat([s[rank * 40:(rank + 1) * 40] for s in sends])
        expect("alltoall %s" % dtype, got, want)
        if dtype not in (torch.bool, torch.uint8):
            inputs = [values(r, 1001 * 4, dtype, 10).reshape(1001, 4) for r in range(size)]
            total = reference("sum", inputs, dtype)
            mine = hvd.reducescatter(late(inputs[rank], device), op=hvd.Sum,
                                     name="rs.%s" % dtype)
            first = sum(1001 // size + (1 if r < 1001 % size else 0) for r in range(rank))
            expect("reducescatter %s" % dtype, mine, total[first:first + mine.shape[0]])

    # On a side stream (not the default one): inputs made there behind a GPU sleep, outputs
    # allocated by the runtime's thread as if on that stream, then used and read there with
    # nothing but ronde's promise ordering them after its copies.
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        for step in range(3):
            parts = [values(r, (200 + r) * 4, torch.float32, 50 + step).reshape(200 + r, 4)
                     for r in range(size)]
            gathered = hvd.allgather(late(parts[rank], device), name="side.ag.%d" % step)
            inputs = [values(r, n, torch.float32, 60 + step) for r in range(size)]
            reduced = hvd.allreduce(late(inputs[rank], device), op=hvd.Sum,
                                    name="side.ar.%d" % step)
            doubled = gathered * 2  # queued on the side stream, after the runtime's copies
            expect("side stream allgather #%d" % step, doubled, torch.cat(parts) * 2)
            expect("side stream allreduce #%d" % step, reduced, reference("sum", inputs,
                                                                          torch.float32))
            del gathered, doubled, reduced

    print("rank %d: %d failures" % (rank, len(failures)))
    for f in failures[:20]:
        print("rank %d: FAILED %s" % (rank, f))
    hvd.shutdown()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    os.environ.setdefault("RONDE_GPU_OPERATIONS", "host")
    main()
