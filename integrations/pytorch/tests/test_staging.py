#!/usr/bin/python3
"""The device staging pipeline of the "switchml" backend, on the CPU (CTest pytorch_staging).

  test_staging.py suite --switchml BUILD/switchml --pythonpath BUILD/python

CUDA tensors are staged through pinned host memory (integrations/pytorch/staging.h). Here two
worker processes turn that path on for CPU tensors with a fake device (the test-only hook
SwitchMLBackend._test_staging_enable): copies run at once, and the "device-to-host copy" of a
chunk completes only when the test lets it (_test_staging_hold / _unhold / _release), so the
pipeline's logic runs deterministically without a GPU. Checks: chunking (SwitchML calls per
tensor, from the size only), results of SUM/AVG for float32/int32/float16, several tensors per
call, non-contiguous tensors, allreduce_coalesced with mixed dtypes and an empty tensor; FIFO
order across ranks (rank 0 holds a call's copy: the call after it must wait, and both must be
right once released); a failed switch call (NaN in one chunk) fails that work only and the next
call proceeds; a copy that never finishes fails its work after the staging timeout and later
calls proceed; chained async calls on one tensor. No timing assertions: the timeout is a
deadline on a copy that is held until the test releases it.
Exit code 77 (CTest: skipped) when this interpreter cannot import torch.
"""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness.py
from harness import (arg_parser, dispatch, exact_sum, finish_worker, init_worker, max_err, parent_main,
                     rank_data, run_with_switch)

CHUNK_BYTES = 4096  # 1024 elements per chunk


def parent(args):
    return parent_main(args, "switchml_staging_",
                       lambda tmpdir: run_with_switch(args, tmpdir, __file__, "worker", "staging"))


def worker(args):
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
    pg = switchml_torch.backend()
    pg._test_staging_enable(CHUNK_BYTES, datetime.timedelta(seconds=60))
    F32_TOL = 1e-5

    def submitted():
        return pg.stats()["calls_submitted"]

    def counts():
        return pg._test_staging_counts()

    # Chunking: 5000 float32 elements are 5 chunks of at most 1024 (4 full, 1 of 904).
    n = 5000
    before, c0 = submitted(), counts()
    x = rank_data(rank, n, torch.float32, 1)
    dist.all_reduce(x)
    c1 = counts()
    c.check(max_err(x, exact_sum(world, n, torch.float32, 1)) <= F32_TOL, "float32 SUM through staging")
    c.check(submitted() - before == 5, f"5000 elements in chunks of 1024 are 5 SwitchML calls "
            f"(got {submitted() - before})")
    c.check(c1["copies_to_host"] - c0["copies_to_host"] == 5 and c1["copies_to_device"] - c0["copies_to_device"] == 5
            and c1["calls_done"] - c0["calls_done"] == 1, f"5 copies each way, 1 call done ({c1})")

    # int32 exact (one chunk exactly full, then 1 element), AVG, float16, several tensors, strides.
    x = rank_data(rank, 1025, torch.int32, 2)
    before = submitted()
    dist.all_reduce(x)
    c.check(torch.equal(x, exact_sum(world, 1025, torch.int32, 2)), "int32 SUM through staging is exact")
    c.check(submitted() - before == 2, "1025 elements are 2 chunks")
    x = rank_data(rank, 3000, torch.float32, 3)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    c.check(max_err(x, exact_sum(world, 3000, torch.float32, 3) / world) <= F32_TOL, "float32 AVG through staging")
    h = rank_data(rank, 2500, torch.float16, 4)
    ref = sum(rank_data(r, 2500, torch.float16, 4).to(torch.float32) for r in range(world)).to(torch.float16)
    dist.all_reduce(h)
    c.check(h.dtype == torch.float16 and max_err(h, ref) <= 2 ** -6 * ref.abs().max().item(),
            f"float16 SUM through a float32 staging buffer (max error {max_err(h, ref):.3g})")
    a, b = rank_data(rank, 1500, torch.int32, 5), rank_data(rank, 1500, torch.int32, 6)
    ref = (exact_sum(world, 1500, torch.int32, 5).to(torch.int64) + exact_sum(world, 1500, torch.int32, 6))
    ref = ((ref + 2**31) % 2**32 - 2**31).to(torch.int32)
    pg.allreduce([a, b]).wait()
    c.check(torch.equal(a, ref) and torch.equal(b, ref), "allreduce([a, b]): local sum, result in both")
    base = rank_data(rank, 4000, torch.float32, 7)
    strided = base[::2]
    dist.all_reduce(strided)
    ref = exact_sum(world, 4000, torch.float32, 7)[::2]
    c.check(max_err(strided, ref) <= F32_TOL and torch.equal(base[1::2], rank_data(rank, 4000, torch.float32, 7)[1::2]),
            "non-contiguous view: reduced, the elements between untouched")

    # allreduce_coalesced: mixed dtypes, an empty tensor; each reduced on its own.
    ts = [rank_data(rank, 2100, torch.float32, 8), rank_data(rank, 10, torch.int32, 9),
          torch.zeros(0, dtype=torch.float32), rank_data(rank, 1100, torch.bfloat16, 10)]
    refs = [exact_sum(world, 2100, torch.float32, 8), exact_sum(world, 10, torch.int32, 9), torch.zeros(0),
            sum(rank_data(r, 1100, torch.bfloat16, 10).to(torch.float32) for r in range(world))]
    before = submitted()
    pg.allreduce_coalesced(ts).wait()
    c.check(submitted() - before == 3 + 1 + 0 + 2, f"coalesced: 3 + 1 + 0 + 2 chunks (got {submitted() - before})")
    c.check(max_err(ts[0], refs[0]) <= F32_TOL and torch.equal(ts[1], refs[1]) and ts[2].numel() == 0
            and max_err(ts[3], refs[3]) <= 2 ** -7 * refs[3].abs().max().item(),
            "coalesced float32, int32, empty, bfloat16 all right")

    # FIFO across ranks: rank 0's copy of call A is held; call B (after A) must not start before
    # A on rank 0, though B's own copy is done. A and B have the same size, so B paired with the
    # other rank's A would give wrong sums.
    xa, xb = rank_data(rank, 3000, torch.int32, 11), rank_data(rank, 3000, torch.int32, 12)
    if rank == 0:
        pg._test_staging_hold()
    wa = dist.all_reduce(xa, async_op=True)
    if rank == 0:
        pg._test_staging_unhold()
    wb = dist.all_reduce(xb, async_op=True)
    if rank == 0:
        c.check(not wa.is_completed() and not wb.is_completed(),
                "held copy: the call and the one after it wait (FIFO, the same job order on every rank)")
        pg._test_staging_release()
    wa.wait()
    wb.wait()
    c.check(torch.equal(xa, exact_sum(world, 3000, torch.int32, 11))
            and torch.equal(xb, exact_sum(world, 3000, torch.int32, 12)),
            "after the release both calls are right on every rank")

    # A failed switch call (NaN in the second chunk, on rank 0) fails that work only; the call
    # after it, issued before the failure is seen, is right.
    bad = rank_data(rank, 3000, torch.float32, 13)
    if rank == 0:
        bad[1500] = float("nan")
    good = rank_data(rank, 2000, torch.float32, 14)
    wbad = dist.all_reduce(bad, async_op=True)
    wgood = dist.all_reduce(good, async_op=True)
    c.raises(wbad.wait, RuntimeError, "chunk 2 of 3" if rank == 0 else "rejected",
             "a NaN in chunk 2 fails that all-reduce at wait()")
    wgood.wait()
    c.check(max_err(good, exact_sum(world, 2000, torch.float32, 14)) <= F32_TOL, "... and the next call is right")

    # Chained async calls on one tensor: the second sees the first's result.
    t = rank_data(rank, 2500, torch.int32, 15)
    w1 = dist.all_reduce(t, async_op=True)
    w2 = dist.all_reduce(t, async_op=True)
    w1.wait()
    w2.wait()
    ref = exact_sum(world, 2500, torch.int32, 15).to(torch.int64) * world
    c.check(torch.equal(t, ((ref + 2**31) % 2**32 - 2**31).to(torch.int32)), "2 chained async SUMs on one tensor")

    # A copy that never finishes: both ranks hold the same call, whose work fails after the
    # staging timeout; neither rank sends it, so the call after it is right.
    pg._test_staging_timeout(datetime.timedelta(milliseconds=300))
    stuck = rank_data(rank, 1000, torch.float32, 16)
    after = rank_data(rank, 1000, torch.int32, 17)
    pg._test_staging_hold()
    wstuck = dist.all_reduce(stuck, async_op=True)
    pg._test_staging_unhold()
    wafter = dist.all_reduce(after, async_op=True)
    c.raises(wstuck.wait, RuntimeError, "did not finish within 300 ms", "a copy that never finishes times out")
    wafter.wait()
    c.check(torch.equal(after, exact_sum(world, 1000, torch.int32, 17)), "... and the call after it is right")
    pg._test_staging_release()

    return finish_worker(c)


def main():
    return dispatch(arg_parser(["suite", "worker"]), {"worker": worker}, parent)


if __name__ == "__main__":
    sys.exit(main())
