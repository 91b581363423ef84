#!/usr/bin/python3
"""CUDA tensors through the "switchml" backend (CTest pytorch_cuda; needs a GPU).

  test_cuda.py suite --switchml BUILD/switchml --pythonpath BUILD/python

Two worker processes (cuda:rank on a machine with two GPUs or more, both on cuda:0 otherwise),
each phase with a switch of its own:
  switchml: init_process_group("switchml") (CPU and CUDA on one SwitchML backend), staging
            chunks of 1 MiB (SWITCHML_STAGING_CHUNK_BYTES). int32 SUM bit-exact, float32 SUM
            and AVG within the quantization tolerance, float16; allreduce_coalesced with mixed
            dtypes; CPU and CUDA calls interleaved in one job; stream order (the input written on
            a side stream after a GPU sleep, the call made with that stream current and no sync;
            consumers on other streams wait through work.wait() and through the future); a
            large tensor (12 chunks: SwitchML calls counted); chained async calls on one tensor;
            a Gloo fallback (MAX) on CUDA; DDP on CUDA against the same run over Gloo.
  map:      init_process_group("cpu:gloo,cuda:switchml"): CUDA all-reduces go through SwitchML,
            CPU ones through Gloo (the switch's call counter says which).
Exit code 77 (CTest: skipped) when torch cannot be imported or torch.cuda.is_available() is false.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness.py
from harness import (SKIP, arg_parser, dispatch, exact_sum, finish_worker, init_worker, max_err, parent_main,
                     rank_data, run_with_switch, skip_without_torch, use_pythonpath)

CHUNK_BYTES = 1 << 20
F32_TOL = 1e-5  # |x| < 16: quantization error ~2^-26, plus float32 rounding of the sum


def parent(args):
    if skip_without_torch():
        return SKIP
    import torch
    if not torch.cuda.is_available():
        print("skipped: torch.cuda.is_available() is false (no GPU); pytorch_staging covers the "
              "staging pipeline on the CPU")
        return SKIP

    def body(root):
        ok = True
        for phase in ("switchml", "map"):
            tmpdir = os.path.join(root, phase)
            os.makedirs(tmpdir)
            ok = run_with_switch(args, tmpdir, __file__, "worker", phase, extra=("--phase", phase),
                                 env_extra={"SWITCHML_STAGING_CHUNK_BYTES": str(CHUNK_BYTES)},
                                 log_label=f"{phase} ") and ok
        return ok
    return parent_main(args, "switchml_cuda_", body)


def wrap32(t64):
    import torch
    return ((t64 + 2**31) % 2**32 - 2**31).to(torch.int32)


def worker(args):
    use_pythonpath(args)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    c = init_worker(args, "switchml" if args.phase == "switchml" else "cpu:gloo,cuda:switchml")
    pg = switchml_torch.backend(device="cuda")

    def submitted():
        return pg.stats()["calls_submitted"]

    def on_gpu(t):
        return t.to(dev)

    if args.phase == "map":
        c.check(pg is not None, "cpu:gloo,cuda:switchml: the CUDA backend is SwitchMLBackend")
        before = submitted()
        x = on_gpu(rank_data(rank, 5000, torch.int32, 1))
        dist.all_reduce(x)
        c.check(torch.equal(x.cpu(), exact_sum(world, 5000, torch.int32, 1)), "CUDA int32 SUM (switchml) exact")
        c.check(submitted() - before == 1, "... through the switch (1 call)")
        before = submitted()
        y = rank_data(rank, 5000, torch.int32, 2)
        dist.all_reduce(y)
        c.check(torch.equal(y, exact_sum(world, 5000, torch.int32, 2)), "CPU int32 SUM (gloo) exact")
        c.check(submitted() == before, "... not through the switch")
        return finish_worker(c)

    c.check(isinstance(switchml_torch.backend(device="cpu"), switchml_torch.SwitchMLBackend),
            "init_process_group(\"switchml\"): SwitchML serves cpu and cuda")

    # Results: int32 exact (with wrap-around), float32 SUM/AVG, float16; device and dtype kept.
    n = 100003
    x = on_gpu(rank_data(rank, n, torch.int32, 1))
    x[:3] = 2**31 - 1
    ref = exact_sum(world, n, torch.int32, 1)
    ref[:3] = wrap32(torch.tensor([(2**31 - 1) * world] * 3, dtype=torch.int64))
    dist.all_reduce(x)
    c.check(x.device == dev and x.dtype == torch.int32 and torch.equal(x.cpu(), ref),
            "CUDA int32 SUM is bit-exact (incl. wrap-around), on its device")
    x = on_gpu(rank_data(rank, n, torch.float32, 2))
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    ref = exact_sum(world, n, torch.float32, 2)
    c.check(max_err(x.cpu(), ref) <= F32_TOL, f"CUDA float32 SUM within {F32_TOL} ({max_err(x.cpu(), ref):.3g})")
    c.check(max_err(y.cpu(), ref / world) <= F32_TOL, "CUDA float32 AVG within tolerance")
    h = on_gpu(rank_data(rank, 5000, torch.float16, 3))
    href = sum(rank_data(r, 5000, torch.float16, 3).to(torch.float32) for r in range(world)).to(torch.float16)
    dist.all_reduce(h)
    c.check(h.dtype == torch.float16 and max_err(h.cpu(), href) <= 2 ** -6 * href.abs().max().item(),
            "CUDA float16 SUM within one rounding")

    # allreduce_coalesced with mixed dtypes.
    ts = [on_gpu(rank_data(rank, 3000, torch.float32, 4)), on_gpu(rank_data(rank, 77, torch.int32, 5))]
    pg.allreduce_coalesced(ts).wait()
    c.check(max_err(ts[0].cpu(), exact_sum(world, 3000, torch.float32, 4)) <= F32_TOL
            and torch.equal(ts[1].cpu(), exact_sum(world, 77, torch.int32, 5)), "CUDA allreduce_coalesced")

    # CPU and CUDA calls interleaved in one job (one call order for both).
    a = rank_data(rank, 4000, torch.int32, 6)
    b = on_gpu(rank_data(rank, 4000, torch.int32, 7))
    a2 = rank_data(rank, 4000, torch.int32, 8)
    works = [dist.all_reduce(t, async_op=True) for t in (a, b, a2)]
    for w in works:
        w.wait()
    c.check(torch.equal(a, exact_sum(world, 4000, torch.int32, 6)) and torch.equal(b.cpu(), exact_sum(world, 4000, torch.int32, 7))
            and torch.equal(a2, exact_sum(world, 4000, torch.int32, 8)), "CPU, CUDA, CPU async calls interleaved")

    # Stream order: the input is written on a side stream after a GPU sleep, the call is made
    # with that stream current and no sync; consumers on other streams wait through the work
    # and through the future.
    n = 8 << 20
    src = on_gpu(rank_data(rank, n, torch.int32, 9))
    src2 = on_gpu(rank_data(rank, n, torch.int32, 10))
    side, consumer, consumer2 = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = torch.zeros(n, dtype=torch.int32, device=dev)
        x2 = torch.zeros(n, dtype=torch.int32, device=dev)
        torch.cuda._sleep(100_000_000)
        x.copy_(src)
        x2.copy_(src2)
        w = dist.all_reduce(x, async_op=True)
        fut = dist.all_reduce(x2, async_op=True).get_future()
    with torch.cuda.stream(consumer):
        w.wait()
        y = x * 1
        y_host = y.cpu()
    with torch.cuda.stream(consumer2):
        fut.wait()
        z_host = (x2 * 1).cpu()
    c.check(torch.equal(y_host, exact_sum(world, n, torch.int32, 9)),
            "stream order: input written on a side stream, consumer on another stream after work.wait()")
    c.check(torch.equal(z_host, exact_sum(world, n, torch.int32, 10)), "... and after future.wait()")

    # A large tensor: 12 chunks of 1 MiB.
    n = 3_000_000
    before = submitted()
    x = on_gpu(rank_data(rank, n, torch.float32, 11))
    dist.all_reduce(x)
    chunks = (n * 4 + CHUNK_BYTES - 1) // CHUNK_BYTES
    c.check(submitted() - before == chunks, f"{n} float32 elements are {chunks} SwitchML calls "
            f"(got {submitted() - before})")
    c.check(max_err(x.cpu(), exact_sum(world, n, torch.float32, 11)) <= F32_TOL, "large CUDA tensor: SUM right")

    # Chained async calls on one tensor.
    t = on_gpu(rank_data(rank, 300_000, torch.int32, 12))
    w1 = dist.all_reduce(t, async_op=True)
    w2 = dist.all_reduce(t, async_op=True)
    w1.wait()
    w2.wait()
    c.check(torch.equal(t.cpu(), wrap32(exact_sum(world, 300_000, torch.int32, 12).to(torch.int64) * world)),
            "2 chained async SUMs on one CUDA tensor")

    # A Gloo fallback on CUDA (MAX).
    m = on_gpu(rank_data(rank, 1000, torch.float32, 13))
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    mref = torch.stack([rank_data(r, 1000, torch.float32, 13) for r in range(world)]).amax(dim=0)
    c.check(torch.equal(m.cpu(), mref), "CUDA MAX through the inner Gloo group")

    # DDP on CUDA: the same run over switchml and over Gloo.
    gloo = dist.new_group(backend="gloo")

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index], process_group=group,
                                                        bucket_cap_mb=0.01)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(10):
            inp = torch.randn(16, 32, generator=g).to(dev)
            target = torch.randn(16, 4, generator=g).to(dev)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(inp), target).backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()

    before = submitted()
    p_sw = train(None)
    calls = submitted() - before
    p_gloo = train(gloo)
    c.check(calls >= 10, f"DDP on CUDA: gradients went through SwitchML ({calls} calls in 10 steps)")
    c.check(max_err(p_sw, p_gloo) <= 1e-4, f"DDP on CUDA over switchml == over gloo ({max_err(p_sw, p_gloo):.3g})")
    p0 = p_sw.clone()
    dist.broadcast(p0, 0, group=gloo)
    c.check(torch.equal(p0, p_sw), "DDP parameters identical on every rank")

    return finish_worker(c)


def main():
    p = arg_parser(["suite", "worker"])
    p.add_argument("--phase", choices=["switchml", "map"], default="switchml")
    return dispatch(p, {"worker": worker}, parent)


if __name__ == "__main__":
    sys.exit(main())
