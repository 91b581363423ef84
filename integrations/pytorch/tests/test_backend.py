#!/usr/bin/python3
"""End-to-end tests of the torch.distributed backend "switchml" (CTest label `pytorch`).

  test_backend.py suite    --switchml BUILD/switchml --pythonpath BUILD/python
  test_backend.py torchrun --switchml BUILD/switchml --pythonpath BUILD/python

Each mode starts its own switch (`switchml switch` on free ports) and two worker processes:
  suite:    init_process_group("switchml") over a FileStore; SWITCHML_CONTROLLER is given to
            rank 0 only (rank 1 reads it from the store). Checks int32 bit-exact sums (with
            wrap-around), float32 within the quantization tolerance, AVG, float16/bfloat16,
            several tensors per call, non-contiguous and empty tensors, async works with
            wait/is_completed/get_future, errors at the call (dtype, op) and at wait() (NaN),
            delegated broadcast/allgather/barrier, and a 2-process DDP run that must end with
            the same parameters as the same run over Gloo. Then a world-size-1 group without
            SWITCHML_CONTROLLER must fail with a message naming the variable.
  torchrun: the same package launched by `python -m torch.distributed.run --nproc_per_node 2`
            (env:// rendezvous through torchrun's TCPStore): allreduce and a few DDP steps.
Exit code 77 (CTest: skipped) when this interpreter cannot import torch.
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
WORKER_TIMEOUT_S = 100


# ---------------------------------------------------------------- parent side

def start_switch(binary, tmpdir):
    ready = os.path.join(tmpdir, "switch.json")
    log = open(os.path.join(tmpdir, "switch.log"), "w")
    proc = subprocess.Popen([binary, "switch", "--bind", "127.0.0.1", "--port", "0",
                             "--controller-port", "0", "--ready-file", ready],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"switch exited with {proc.returncode}: "
                               + open(log.name).read())
        if os.path.exists(ready):  # written atomically (rename)
            with open(ready) as f:
                info = json.load(f)
            return proc, f"127.0.0.1:{info['controller_port']}"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("switch did not become ready within 30 s")


def stop_switch(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_processes(cmds_envs, tmpdir, timeout_s, tag):
    """Runs the commands concurrently; returns [(returncode, output)] (None = timed out)."""
    procs = []
    for i, (cmd, env) in enumerate(cmds_envs):
        out = open(os.path.join(tmpdir, f"{tag}_{i}.log"), "w+")
        procs.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), out))
    deadline = time.time() + timeout_s
    results = []
    for proc, out in procs:
        try:
            rc = proc.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        out.seek(0)
        results.append((rc, out.read()))
        out.close()
    return results


def pythonpath_args(args):
    """The --pythonpath to pass on to worker processes (none: the installed package)."""
    return ["--pythonpath", args.pythonpath] if args.pythonpath else []


def base_env(pythonpath):
    env = dict(os.environ)
    env.pop("SWITCHML_CONTROLLER", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # two workers + a switch share 2 cores
    return env


def report(results, tag):
    ok = True
    for i, (rc, out) in enumerate(results):
        status = "timed out" if rc is None else f"exit {rc}"
        print(f"----- {tag} process {i}: {status}")
        print(out.rstrip())
        ok = ok and rc == 0
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent(args):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {sys.executable} cannot import torch ({e})")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="switchml_pytorch_") as tmpdir:
        switch, controller = start_switch(args.switchml, tmpdir)
        try:
            if args.mode == "suite":
                ok = run_suite(args, tmpdir, controller)
            else:
                ok = run_torchrun(args, tmpdir, controller)
        finally:
            stop_switch(switch)
        if not ok:
            print("----- switch log")
            print(open(os.path.join(tmpdir, "switch.log")).read().rstrip())
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def run_suite(args, tmpdir, controller):
    me = os.path.abspath(__file__)
    init = "file://" + os.path.join(tmpdir, "store")
    cmds = []
    for rank in range(2):
        env = base_env(args.pythonpath)
        if rank == 0:  # rank 1 must get the address through the store
            env["SWITCHML_CONTROLLER"] = controller
        cmds.append(([sys.executable, me, "worker-suite", "--rank", str(rank), "--world", "2",
                      "--init", init, *pythonpath_args(args)], env))
    ok = report(run_processes(cmds, tmpdir, WORKER_TIMEOUT_S, "suite"), "suite worker")

    # Stream semantics: 3 ranks, chained async all-reduces on one tensor, on a switch of their own.
    ok = run_stream(args, os.path.join(tmpdir, "stream"), world=3) and ok

    # No controller address anywhere: a clear error, not a hang or a crash.
    init1 = "file://" + os.path.join(tmpdir, "store1")
    cmd = ([sys.executable, me, "worker-no-controller", "--init", init1,
            *pythonpath_args(args)], base_env(args.pythonpath))
    ok = report(run_processes([cmd], tmpdir, 60, "nocontroller"), "no-controller") and ok
    return ok


def run_stream(args, tmpdir, world):
    os.makedirs(tmpdir)
    me = os.path.abspath(__file__)
    init = "file://" + os.path.join(tmpdir, "store")
    switch, controller = start_switch(args.switchml, tmpdir)
    try:
        env = base_env(args.pythonpath)
        env["SWITCHML_CONTROLLER"] = controller
        cmds = [([sys.executable, me, "worker-stream", "--rank", str(rank), "--world", str(world),
                  "--init", init, *pythonpath_args(args)], env) for rank in range(world)]
        ok = report(run_processes(cmds, tmpdir, WORKER_TIMEOUT_S, "stream"), "stream worker")
    finally:
        stop_switch(switch)
    if not ok:
        print("----- stream switch log")
        print(open(os.path.join(tmpdir, "switch.log")).read().rstrip())
    return ok


def run_torchrun(args, tmpdir, controller):
    me = os.path.abspath(__file__)
    env = base_env(args.pythonpath)
    env["SWITCHML_CONTROLLER"] = controller
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           me, "worker-torchrun", *pythonpath_args(args)]
    return report(run_processes([(cmd, env)], tmpdir, WORKER_TIMEOUT_S, "torchrun"), "torchrun")


# ---------------------------------------------------------------- worker side

class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.failures = 0

    def check(self, cond, what):
        print(f"rank {self.rank}: {'ok  ' if cond else 'FAIL'} {what}", flush=True)
        if not cond:
            self.failures += 1

    def raises(self, fn, exc_types, needle, what):
        try:
            fn()
        except exc_types as e:
            self.check(needle in str(e), f"{what} (raised {type(e).__name__}: {str(e).splitlines()[0]})")
            return
        except Exception as e:  # wrong type
            self.check(False, f"{what}: raised {type(e).__name__} instead of {exc_types}: {e}")
            return
        self.check(False, f"{what}: did not raise")


def rank_data(rank, n, dtype, seed):
    import torch
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.int32:
        return torch.randint(-2**30, 2**30, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    return (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)


def exact_sum(world, n, dtype, seed):
    """float64 sum (floats) or the int32 sum with 32-bit wrap-around, over every rank's data."""
    import torch
    if dtype == torch.int32:
        s = sum(rank_data(r, n, dtype, seed).to(torch.int64) for r in range(world))
        return ((s + 2**31) % 2**32 - 2**31).to(torch.int32)
    return sum(rank_data(r, n, dtype, seed).to(torch.float64) for r in range(world))


def max_err(a, b):
    import torch
    if a.numel() == 0:
        return 0.0
    return (a.to(torch.float64) - b.to(torch.float64)).abs().max().item()


def worker_suite(args):
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
    c = Checker(rank)
    dist.init_process_group("switchml", init_method=args.init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    pg = switchml_torch.backend()
    c.check(isinstance(pg, switchml_torch.SwitchMLBackend), "the default group's CPU backend is SwitchMLBackend")
    c.check(dist.get_backend() == "switchml", f"get_backend() == 'switchml' (got {dist.get_backend()!r})")
    c.check(pg.controller_address.startswith("127.0.0.1:"),
            f"controller address {pg.controller_address!r} (rank 1 reads it from the store)")
    gloo = dist.new_group(backend="gloo")

    # SWITCHML_CALL_TIMEOUT_MS, and SWITCHML_JOB_TIMEOUT_MS as its deprecated name (with a note).
    import contextlib
    import io
    cfg = switchml_torch.config_from_env({"SWITCHML_CALL_TIMEOUT_MS": "2500"})
    c.check(cfg.call_timeout == datetime.timedelta(milliseconds=2500), "SWITCHML_CALL_TIMEOUT_MS sets call_timeout")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        cfg = switchml_torch.config_from_env({"SWITCHML_JOB_TIMEOUT_MS": "1500"})
    c.check(cfg.call_timeout == datetime.timedelta(milliseconds=1500) and cfg.job_timeout == cfg.call_timeout
            and "SWITCHML_JOB_TIMEOUT_MS is deprecated, use SWITCHML_CALL_TIMEOUT_MS" in err.getvalue(),
            "deprecated SWITCHML_JOB_TIMEOUT_MS still sets call_timeout, with a note on stderr")
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            switchml_torch.config_from_env({"SWITCHML_JOB_TIMEOUT_MS": "1500", "SWITCHML_CALL_TIMEOUT_MS": "900"})
        c.check(False, "disagreeing SWITCHML_JOB_TIMEOUT_MS and SWITCHML_CALL_TIMEOUT_MS raise")
    except ValueError as e:
        c.check("disagree" in str(e), f"disagreeing SWITCHML_JOB_TIMEOUT_MS and SWITCHML_CALL_TIMEOUT_MS raise ({e})")

    F32_TOL = 1e-5  # |x| < 16: quantization error ~2^-26, plus float32 rounding of the sum

    # int32: bit-exact, with wrap-around, several packets long; same as Gloo.
    n = 100003
    x = rank_data(rank, n, torch.int32, 1)
    x[:3] = 2**31 - 1  # 2 * (2^31 - 1) wraps to -2
    ref = exact_sum(world, n, torch.int32, 1)
    ref[:3] = -2
    y_gloo = x.clone()
    dist.all_reduce(y_gloo, group=gloo)
    dist.all_reduce(x)
    c.check(torch.equal(x, ref), "int32 allreduce SUM is bit-exact (incl. wrap-around)")
    c.check(torch.equal(x, y_gloo), "int32 allreduce equals Gloo's")

    # float32 SUM and AVG.
    n = 2 * 65536 + 17
    x = rank_data(rank, n, torch.float32, 2)
    ref = exact_sum(world, n, torch.float32, 2)
    y_gloo = x.clone()
    dist.all_reduce(y_gloo, group=gloo)
    y_avg = x.clone()
    dist.all_reduce(x)
    e = max_err(x, ref)
    c.check(x.dtype == torch.float32 and e <= F32_TOL, f"float32 SUM within {F32_TOL} (max error {e:.3g})")
    c.check(max_err(x, y_gloo) <= F32_TOL, "float32 SUM matches Gloo's")
    dist.all_reduce(y_avg, op=dist.ReduceOp.AVG)
    e = max_err(y_avg, ref / world)
    c.check(e <= F32_TOL, f"float32 AVG = SUM / world within {F32_TOL} (max error {e:.3g})")

    # float16 / bfloat16 (host float32 path), SUM and AVG.
    for dtype, rtol in ((torch.float16, 2**-10), (torch.bfloat16, 2**-7)):
        x = rank_data(rank, 5000, dtype, 3)
        ref = sum(rank_data(r, 5000, dtype, 3).to(torch.float64) for r in range(world))
        y = x.clone()
        dist.all_reduce(x)
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        tol = rtol * ref.abs() + 1e-3
        ok_sum = bool(((x.to(torch.float64) - ref).abs() <= tol).all())
        ok_avg = bool(((y.to(torch.float64) - ref / world).abs() <= tol / world).all())
        c.check(x.dtype == dtype and ok_sum, f"{dtype} SUM within one rounding (max error {max_err(x, ref):.3g})")
        c.check(y.dtype == dtype and ok_avg, f"{dtype} AVG within one rounding")

    # Several tensors per call. allreduce_coalesced: each tensor on its own.
    sizes = (100, 7, 0, 70000)
    ts = [rank_data(rank, k, torch.float32, 10 + i) for i, k in enumerate(sizes)]
    dist.all_reduce_coalesced(ts)
    errs = [max_err(t, exact_sum(world, k, torch.float32, 10 + i)) for i, (t, k) in enumerate(zip(ts, sizes))]
    c.check(all(e <= F32_TOL for e in errs), f"all_reduce_coalesced of 4 float32 tensors (sizes {sizes})")
    ts = [rank_data(rank, k, torch.int32, 20 + i) for i, k in enumerate(sizes)]
    work = dist.all_reduce_coalesced(ts, async_op=True)
    work.wait()
    c.check(all(torch.equal(t, exact_sum(world, k, torch.int32, 20 + i)) for i, (t, k) in enumerate(zip(ts, sizes))),
            "all_reduce_coalesced of 4 int32 tensors, async, bit-exact")
    ts = [rank_data(rank, 300, torch.float32, 30), rank_data(rank, 3000, torch.int32, 31),
          rank_data(rank, 30, torch.bfloat16, 32)]
    refs = [exact_sum(world, 300, torch.float32, 30), exact_sum(world, 3000, torch.int32, 31),
            sum(rank_data(r, 30, torch.bfloat16, 32).to(torch.float64) for r in range(world))]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    c.check(max_err(ts[0], refs[0]) <= F32_TOL and torch.equal(ts[1], refs[1])
            and max_err(ts[2], refs[2]) <= 2**-7 * refs[2].abs().max().item() + 1e-3,
            "allreduce_coalesced with mixed dtypes (float32, int32, bfloat16)")
    # allreduce with a list: local tensors summed too, as Gloo does.
    a = [rank_data(rank, 999, torch.int32, 40), rank_data(rank, 999, torch.int32, 41)]
    b = [t.clone() for t in a]
    # (torch 2.x has no all_reduce_multigpu: the backends' own allreduce takes the list)
    pg.allreduce(a).wait()
    gloo._get_backend(torch.device("cpu")).allreduce(b).wait()
    c.check(all(torch.equal(p, q) for p, q in zip(a, b)), "allreduce of a 2-tensor list equals Gloo's (int32)")

    # Async works: wait, is_completed, get_future (+ then).
    sizes = (1, 1000, 65536 + 1, 256)
    ts = [rank_data(rank, k, torch.int32, 50 + i) for i, k in enumerate(sizes)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    doubled = futs[2].then(lambda f: f.value()[0] * 2)
    torch.futures.wait_all(futs)
    for w in works:
        w.wait()
    refs = [exact_sum(world, k, torch.int32, 50 + i) for i, k in enumerate(sizes)]
    c.check(all(w.is_completed() for w in works), "async works completed after wait()")
    c.check(all(torch.equal(t, r) for t, r in zip(ts, refs)), "4 concurrent async allreduces correct")
    c.check(all(f.value()[0].data_ptr() == t.data_ptr() for f, t in zip(futs, ts)),
            "future value is the list of output tensors")
    c.check(torch.equal(doubled.wait(), refs[2] * 2), "future.then() callback ran on the result")

    # is_completed() is false while the other rank has not contributed yet: rank 1 starts its
    # all-reduce only once rank 0 has checked (a file beside the FileStore tells it), so no
    # timing between the two processes matters.
    x = torch.full((1000,), rank + 1, dtype=torch.int32)
    checked = args.init[len("file://"):] + ".rank0-checked"
    if rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(checked):
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank 0 did not create {checked} within 60 s")
            time.sleep(0.01)
    w = dist.all_reduce(x, async_op=True)
    if rank == 0:
        c.check(not w.is_completed(), "is_completed() is false while rank 1 has not sent yet")
        open(checked, "w").close()
    w.wait()
    c.check(w.is_completed() and torch.equal(x, torch.full((1000,), 3, dtype=torch.int32)),
            "is_completed() is true after wait()")

    # Non-contiguous and empty tensors.
    base = rank_data(rank, 3000, torch.float32, 60).reshape(1000, 3)
    col0 = base[:, 0].clone()
    col = base[:, 1]
    dist.all_reduce(col)
    ref = exact_sum(world, 3000, torch.float32, 60).reshape(1000, 3)[:, 1]
    c.check(max_err(base[:, 1], ref) <= F32_TOL and torch.equal(base[:, 0], col0),
            "non-contiguous column reduced in place, neighbours untouched")
    empty = torch.empty(0)
    dist.all_reduce(empty)
    c.check(empty.numel() == 0, "empty tensor allreduce is a no-op")

    # What SwitchML cannot aggregate goes to the inner Gloo group: Gloo's exact results, counted.
    R = dist.ReduceOp
    fallback_cases = [(torch.float32, R.MAX, "op_max"), (torch.float32, R.MIN, "op_min"),
                      (torch.float32, R.PRODUCT, "op_product"), (torch.int32, R.MAX, "op_max"),
                      (torch.int32, R.BXOR, "op_bxor"), (torch.float64, R.SUM, "dtype_float64"),
                      (torch.int64, R.SUM, "dtype_int64"), (torch.uint8, R.SUM, "dtype_uint8")]
    for i, (dtype, op, reason) in enumerate(fallback_cases):
        if dtype.is_floating_point:
            x = rank_data(rank, 3000, torch.float64, 90 + i).to(dtype)
            if op == R.PRODUCT:
                x = 1 + x / 100  # a product of values near 1 stays finite
        else:
            x = rank_data(rank, 3000, torch.int32, 90 + i).to(dtype)
        y_gloo = x.clone()
        before = pg.stats()
        work = dist.all_reduce(x, op=op, async_op=True)
        work.wait()
        dist.all_reduce(y_gloo, op=op, group=gloo)
        after = pg.stats()
        c.check(x.dtype == dtype and torch.equal(x, y_gloo),
                f"{dtype} {op} goes to Gloo: result identical to Gloo's")
        c.check(after["fallback_allreduces"] == before["fallback_allreduces"] + 1
                and after["fallback_" + reason] == before["fallback_" + reason] + 1
                and after["calls_submitted"] == before["calls_submitted"],
                f"... counted in stats()['fallback_allreduces'] and ['fallback_{reason}'], no SwitchML job")
    # float64 AVG: Gloo SUM divided by the world size (Gloo itself has no AVG).
    x = rank_data(rank, 1000, torch.float64, 99)
    dist.all_reduce(x, op=R.AVG)
    c.check(max_err(x, exact_sum(world, 1000, torch.float64, 99) / world) <= 1e-12,
            "float64 AVG through Gloo = SUM / world")
    # all_reduce_coalesced with one float64 tensor: the whole call goes to Gloo.
    ts = [rank_data(rank, 100, torch.float32, 95), rank_data(rank, 50, torch.float64, 96)]
    refs = [t.clone() for t in ts]
    for t in refs:
        dist.all_reduce(t, group=gloo)
    before = pg.stats()["fallback_dtype_float64"]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()  # dist.* wants one dtype
    c.check(all(torch.equal(t, r) for t, r in zip(ts, refs)) and pg.stats()["fallback_dtype_float64"] == before + 1,
            "allreduce_coalesced with a float64 tensor goes to Gloo as a whole")
    # Errors at the call: what neither SwitchML nor Gloo reduces.
    c.raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)), TypeError, "int16",
             "int16 (neither SwitchML nor Gloo) raises at the call")
    c.raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bfloat16), op=R.MAX), TypeError, "bfloat16",
             "bfloat16 MAX (Gloo has no bfloat16) raises at the call")
    c.raises(lambda: dist.all_reduce(torch.ones(4), op=R.BAND), ValueError, "integer dtype",
             "BAND of float32 raises at the call")
    c.raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.AVG), ValueError,
             "AVG of int32", "int32 AVG raises at the call")
    c.raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64), op=R.AVG), ValueError,
             "AVG of int64", "int64 AVG raises at the call")
    c.raises(lambda: pg.allreduce([torch.ones(4), torch.ones(5)]).wait(), ValueError, "same dtype and shape",
             "allreduce list of different shapes raises")
    # Errors at wait(): every rank feeds NaN, so every rank rejects the job locally.
    bad = torch.ones(100)
    bad[17] = float("nan")
    w = dist.all_reduce(bad, async_op=True)
    c.raises(w.wait, RuntimeError, "NaN", "NaN input: the error surfaces at wait()")
    c.raises(w.get_future().wait, RuntimeError, "NaN", "... and on the future")
    x = torch.full((10,), rank + 1, dtype=torch.int32)
    dist.all_reduce(x)
    c.check(torch.equal(x, torch.full((10,), 3, dtype=torch.int32)), "group still works after that error")
    # A call only rank 0 rejects (NaN in its x) fails on both ranks, and y and z, the calls after
    # it, are exact on both (the rejected call still uses its call number on rank 0).
    x = torch.full((1024,), float(rank + 1))
    y = torch.full((1024,), 100.0 * (rank + 1))
    z = torch.full((1024,), 10000.0 * (rank + 1))
    if rank == 0:
        x[700] = float("nan")
    c.raises(lambda: dist.all_reduce(x), RuntimeError, "NaN" if rank == 0 else "was rejected by",
             "a call rank 0 rejects raises on every rank")
    c.check(rank == 0 or torch.equal(x, torch.full((1024,), float(rank + 1))), "... and writes nothing")
    dist.all_reduce(y)
    dist.all_reduce(z)
    c.check(torch.equal(y, torch.full((1024,), 300.0)) and torch.equal(z, torch.full((1024,), 30000.0)),
            f"the calls after it are exact on every rank (y[0] = {y[0].item()}, z[0] = {z[0].item()})")

    # Delegated to Gloo: broadcast, allgather, barrier.
    x = rank_data(rank, 500, torch.float32, 70)
    dist.broadcast(x, src=0)
    c.check(torch.equal(x, rank_data(0, 500, torch.float32, 70)), "broadcast (delegated to Gloo)")
    outs = [torch.empty(10, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(outs, torch.full((10,), rank, dtype=torch.int32))
    c.check(all(torch.equal(o, torch.full((10,), r, dtype=torch.int32)) for r, o in enumerate(outs)),
            "all_gather (delegated to Gloo)")
    dist.barrier()
    c.check(True, "barrier (delegated to Gloo)")

    # DDP: the same training over switchml and over Gloo ends with the same parameters.
    calls_before = pg.stats()["calls_completed"]
    p_sw, p_init = ddp_train(rank, None, steps=15)
    st = pg.stats()
    calls_used = st["calls_completed"] - calls_before
    c.check(all(st["jobs_" + k] == st["calls_" + k] for k in ("submitted", "completed", "failed")),
            "stats(): the deprecated jobs_* keys equal calls_*")
    p_gloo, _ = ddp_train(rank, gloo, steps=15)
    diff = max(max_err(a, b) for a, b in zip(p_sw, p_gloo))
    moved = max(max_err(a, b) for a, b in zip(p_sw, p_init))
    c.check(calls_used > 15, f"DDP gradients went through SwitchML, several buckets per step "
            f"({calls_used} calls in 15 steps)")
    c.check(moved > 1e-2, f"DDP training changed the parameters (by up to {moved:.3g})")
    c.check(diff <= 1e-4, f"DDP over switchml == DDP over gloo after 15 steps (max difference {diff:.3g})")
    flat = torch.cat([p.flatten() for p in p_sw])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat, group=gloo)
    c.check(all(torch.equal(g, gathered[0]) for g in gathered), "DDP parameters identical on every rank")

    dist.destroy_process_group()
    print(f"rank {rank}: {c.failures} failure(s)", flush=True)
    return 1 if c.failures else 0


def block_scaled(rank, n, dtype, seed, block=256):
    """rank_data whose 256-element blocks (one SwitchML packet each) span 2^-4 .. 2^4, so that
    the block exponents differ from block to block (float64 values exactly representable in dtype)."""
    import torch
    x = rank_data(rank, n, torch.float64, seed)
    scale = torch.tensor([2.0 ** ((i // block) % 9 - 4) for i in range(n)], dtype=torch.float64)
    return (x * scale).to(dtype)


def float32_bound(inputs, block=256):
    """Rigorous per-element bound of one float32 SwitchML all-reduce's error, for `inputs` (the
    ranks' float64 values, exactly float32) and 3 workers: see worker_stream."""
    import torch
    m = torch.stack([t.abs() for t in inputs]).amax(dim=0)
    n = m.numel()
    pad = (-n) % block
    m = torch.nn.functional.pad(m, (0, pad)).reshape(-1, block).amax(dim=1, keepdim=True)
    m = m.expand(-1, block).reshape(-1)[:n]
    return m * 2.0 ** -19


def worker_stream(args):
    """Stream semantics (3 ranks): all-reduces on one group behave as if they ran one after
    another in call order. Four async all-reduces on one tensor are called before any wait();
    every element must equal the sequential model, computed in float64 (int32: exact).

    float32 bound, per call: with n = 3 workers and block exponent E (2^(E-1) <= M < 2^E, M the
    block's largest |input| over ranks), one quantum is 1/s = 3 * 2^E / INT32_MAX. Each worker's
    quantization of x*s errs by at most 32 quanta (x*s < 2^30 is rounded to float32: half an ulp
    of 2^29..2^30 is 32), the int32 sum (< 2^31) converted to float32 by at most 64 quanta, and the
    final float32 quotient by 2^-24 * 3 * 2^E: in all (160 * 3 / INT32_MAX + 3 * 2^-24) * 2^E
    < 4.1e-7 * 2^E <= 8.2e-7 * M < 2^-20 * M (quant::QuantizationErrorBound). The test allows
    2^-19 * M per call. After the first call every rank holds the same value, so an error e of
    call k reaches the result of call k+1 as 3e (SUM) or e (AVG = SUM / 3): the bound of the
    chain is sum_k factor_k * 2^-19 * M_k, with M_k the block maximum of call k's input and
    factor_k the product of the factors of the calls after k."""
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
    c = Checker(rank)
    dist.init_process_group("switchml", init_method=args.init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    pg = switchml_torch.backend()
    R = dist.ReduceOp
    n = 5000  # 20 blocks of 256, the last one partial

    def chain(dtype, ops, seed, n=n):
        """All ranks' inputs and the float64 model after each op of `ops` (run in order)."""
        inputs = [block_scaled(r, n, torch.float64, seed) if dtype.is_floating_point
                  else rank_data(r, n, torch.int32, seed).to(torch.float64) for r in range(world)]
        if dtype != torch.float64:  # the values the ranks really hold
            inputs = [t.to(dtype).to(torch.float64) for t in inputs]
        vals, steps = inputs, []
        for op in ops:
            if op in (R.SUM, R.AVG):
                out = sum(vals)
                if op == R.AVG:
                    out = out / world
            elif op == R.MAX:
                out = torch.stack(vals).amax(dim=0)
            else:
                out = torch.stack(vals).amin(dim=0)
            if dtype == torch.int32:
                out = (out.to(torch.int64) + 2**31) % 2**32 - 2**31
                out = out.to(torch.float64)
            elif dtype == torch.float16:
                out = out.to(torch.float16).to(torch.float64)
            steps.append((vals, out))
            vals = [out] * world
        return inputs[rank], steps

    def run(tensors_ops):
        """Calls every (tensor, op) async in order, then waits for each work."""
        works = [dist.all_reduce(t, op=op, async_op=True) for t, op in tensors_ops]
        return [w.wait() for w in works]

    # float32 (blocks of different exponents), int32 (exact, with wrap-around), float16 (staged
    # through float32): four SUMs on one tensor, interleaved with two on a disjoint tensor.
    for dtype, seed in ((torch.float32, 1), (torch.int32, 2), (torch.float16, 3)):
        ops = [R.SUM] * 4
        x0, steps = chain(dtype, ops, seed)
        u0, usteps = chain(torch.float32, [R.SUM, R.SUM], seed + 10, n=3001)
        t = x0.to(dtype)
        u = u0.to(torch.float32)
        run([(t, R.SUM), (u, R.SUM), (t, R.SUM), (t, R.SUM), (u, R.SUM), (t, R.SUM)])
        model = steps[-1][1]
        if dtype == torch.int32:
            c.check(torch.equal(t.to(torch.float64), model),
                    f"int32: 4 chained async SUMs on one tensor = 27 * sum of inputs, bit-exact "
                    f"({int((t.to(torch.float64) != model).sum())} of {n} elements differ)")
        elif dtype == torch.float32:
            bound = torch.zeros(n, dtype=torch.float64)
            for vals, _ in steps:
                bound = 3 * bound + float32_bound(vals)
            err = (t.to(torch.float64) - model).abs()
            c.check(bool((err <= bound).all()),
                    f"float32: 4 chained async SUMs on one tensor = 27 * sum of inputs within the derived "
                    f"bound ({int((err > bound).sum())} of {n} elements outside, max error/bound "
                    f"{(err / bound).max().item():.3g})")
        else:
            # Each call's result is float16(y), y the float32 sum, within float32_bound of the
            # exact sum; rounding is monotone, so it is at most that plus one float16 step (2^-10
            # relative, 2^-24 absolute at the bottom) away from the model's float16(exact sum).
            # Earlier deviations are tripled.
            bound = torch.zeros(n, dtype=torch.float64)
            for vals, out in steps:
                bound = 3 * bound + float32_bound(vals) + out.abs() * 2.0 ** -10 + 2.0 ** -24
            err = (t.to(torch.float64) - model).abs()
            c.check(bool((err <= bound).all()),
                    f"float16: 4 chained async SUMs on one tensor match the sequential model "
                    f"({int((err > bound).sum())} of {n} elements outside, max error {err.max().item():.3g})")
        ubound = 3 * float32_bound(usteps[0][0]) + float32_bound(usteps[1][0])
        c.check(bool(((u.to(torch.float64) - usteps[-1][1]).abs() <= ubound).all()),
                f"... and the 2 interleaved SUMs on a disjoint float32 tensor are right ({dtype} run)")

    # AVG writes after the job: SUM, AVG, SUM, AVG chained on one float32 tensor.
    ops = [R.SUM, R.AVG, R.SUM, R.AVG]
    big = n
    x0, steps = chain(torch.float32, ops, 4, n=big)
    t = x0.to(torch.float32)
    run([(t, op) for op in ops])
    bound = torch.zeros(big, dtype=torch.float64)
    for (vals, _), op in zip(steps, ops):
        bound = (3 if op == R.SUM else 1) * bound + float32_bound(vals)
    err = (t.to(torch.float64) - steps[-1][1]).abs()
    c.check(bool((err <= bound).all()), f"float32: chained SUM, AVG, SUM, AVG on one tensor match the model "
            f"({int((err > bound).sum())} of {big} elements outside)")

    # Gloo fallbacks and SwitchML calls chained on one int32 tensor: MAX, SUM, MIN, SUM.
    ops = [R.MAX, R.SUM, R.MIN, R.SUM]
    x0, steps = chain(torch.int32, ops, 5)
    t = x0.to(torch.int32)
    run([(t, op) for op in ops])
    c.check(torch.equal(t.to(torch.float64), steps[-1][1]),
            "int32: chained MAX (Gloo), SUM, MIN (Gloo), SUM on one tensor, bit-exact")

    # Several local tensors per call (summed first), chained: both hold 3 * 2 * S after two calls.
    a = rank_data(rank, 999, torch.int32, 6)
    b = rank_data(rank, 999, torch.int32, 7)
    s = sum(rank_data(r, 999, torch.int32, 6).to(torch.int64) + rank_data(r, 999, torch.int32, 7).to(torch.int64)
            for r in range(world))
    w1 = pg.allreduce([a, b])
    w2 = pg.allreduce([a, b])
    w1.wait()
    w2.wait()
    ref = ((s * 2 * world + 2**31) % 2**32 - 2**31).to(torch.int32)
    c.check(torch.equal(a, ref) and torch.equal(b, ref), "int32: 2 chained allreduce([a, b]) calls, bit-exact")

    dist.destroy_process_group()
    print(f"rank {rank}: {c.failures} failure(s)", flush=True)
    return 1 if c.failures else 0


def ddp_train(rank, group, steps):
    """Trains a small MLP with DDP over `group` (None = default group); returns (final, initial) params."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1234)  # same initial model everywhere (DDP also broadcasts it)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    initial = [p.detach().clone() for p in model.parameters()]
    # Tiny buckets (DDP reads the first bucket's size from this attribute): several allreduces
    # in flight per step.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1024
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.5)
    g = torch.Generator().manual_seed(99 + rank)  # different data on each rank
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], initial


def worker_no_controller(args):
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    c = Checker(0)
    c.raises(lambda: dist.init_process_group("switchml", init_method=args.init, rank=0, world_size=1,
                                             timeout=datetime.timedelta(seconds=20)),
             RuntimeError, "SWITCHML_CONTROLLER", "init without SWITCHML_CONTROLLER fails with a clear message")
    return 1 if c.failures else 0


def worker_torchrun(args):
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    import torch
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    c = Checker(rank)
    dist.init_process_group("switchml")  # env:// from torchrun
    c.check(dist.get_backend() == "switchml" and world == 2, f"torchrun: backend switchml, world {world}")
    x = rank_data(rank, 70000, torch.int32, 80)
    dist.all_reduce(x)
    c.check(torch.equal(x, exact_sum(world, 70000, torch.int32, 80)), "torchrun: int32 allreduce bit-exact")
    x = rank_data(rank, 70000, torch.float32, 81)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    e = max_err(x, exact_sum(world, 70000, torch.float32, 81) / world)
    c.check(e <= 1e-5, f"torchrun: float32 AVG (max error {e:.3g})")
    params, initial = ddp_train(rank, None, steps=5)
    flat = torch.cat([p.flatten() for p in params])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    c.check(all(torch.equal(g, gathered[0]) for g in gathered) and max_err(params[0], initial[0]) > 0,
            "torchrun: DDP parameters trained and identical on both ranks")
    dist.destroy_process_group()
    print(f"rank {rank}: {c.failures} failure(s)", flush=True)
    return 1 if c.failures else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["suite", "torchrun", "worker-suite", "worker-stream",
                                    "worker-no-controller", "worker-torchrun"])
    p.add_argument("--switchml", help="path of the `switchml` binary")
    p.add_argument("--pythonpath", help="folder that holds the switchml package (default: the installed one)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--init", help="init_method URL")
    args = p.parse_args()
    if args.mode in ("suite", "torchrun"):
        if not args.switchml:
            p.error("--switchml is required")
        return parent(args)
    return {"worker-suite": worker_suite, "worker-stream": worker_stream,
            "worker-no-controller": worker_no_controller,
            "worker-torchrun": worker_torchrun}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
