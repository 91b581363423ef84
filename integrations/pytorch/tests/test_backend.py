#!/usr/bin/python3
"""End-to-end tests of the torch.distributed backend "switchml" (CTest label `pytorch`).

  test_backend.py suite    --switchml BUILD/switchml --pythonpath BUILD/python
  test_backend.py matrix   --switchml BUILD/switchml --pythonpath BUILD/python
  test_backend.py torchrun --switchml BUILD/switchml --pythonpath BUILD/python

Each mode starts its own switch (`switchml switch` on free ports) and two worker processes
(harness.py: what this script shares with test_staging.py and test_cuda.py):
  suite:    init_process_group("switchml") over a FileStore; SWITCHML_CONTROLLER is given to
            rank 0 only (rank 1 reads it from the store). Checks int32 bit-exact sums (with
            wrap-around), float32 within the quantization tolerance, AVG, float16/bfloat16,
            several tensors per call, non-contiguous and empty tensors, async works with
            wait/is_completed/get_future, errors at the call (dtype, op) and at wait() (NaN),
            delegated broadcast/allgather/barrier, and a 2-process DDP run that must end with
            the same parameters as the same run over Gloo. Then a world-size-1 group without
            SWITCHML_CONTROLLER must fail with a message naming the variable, and a group whose
            rank 1 has another SWITCHML_HALF_VIA_SWITCH than rank 0 must fail on rank 1 with a
            ValueError naming both values (and on rank 0 with an error, not a hang); ranks that
            disagree on SWITCHML_FAILOVER all raise ValueError naming every rank's value. The
            stream check also runs over mutual TLS (SWITCHML_TLS_* only; the switch serves TLS).
  matrix:   (ctest pytorch_backend_matrix) all_reduce op x dtype and every other collective x
            dtype, each against the same call on a Gloo group (printed as two tables); DDP
            comm hooks; ZeroRedundancyOptimizer, FSDP and FSDP2 against the same runs over
            Gloo; the parent checks each fallback reason was logged once. Then 2 ranks on a
            switch of their own that the parent kills between two calls, with
            SWITCHML_FAILOVER=0: every rank's next all-reduces fail naming the cause, Gloo
            collectives still work, clean exit (test_failover.py: the default, surviving it). Then,
            twice (a JobService job; job 0 with the operator credential in the ranks'
            environment), 3 ranks of which the parent kills rank 2 between two calls: the next
            all-reduce of ranks 0 and 1 raises a RuntimeError naming rank 2, clean exit.
  torchrun: the same package launched by `python -m torch.distributed.run --nproc_per_node 2`
            (env:// rendezvous through torchrun's TCPStore): allreduce and a few DDP steps.
Exit code 77 (CTest: skipped) when this interpreter cannot import torch.
"""

import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness.py
from harness import (WORKER_TIMEOUT_S, Checker, arg_parser, base_env, collect, dispatch, exact_sum,
                     finish_worker, free_port, init_worker, max_err, parent_main, print_switch_log,
                     pythonpath_args, rank_data, report, run_processes, run_with_switch, spawn, start_switch,
                     stop_switch, use_pythonpath, worker_cmd)

MATRIX_TIMEOUT_S = 240  # hang guard of the matrix workers (several minutes of work on a loaded machine)
DEATH_CALLS = 4  # the switch (a rank) is killed after call DEATH_CALLS - 1 ...
DEATH_CALL_TIMEOUT_MS = 3000  # ... and SwitchML calls fail after this long (SWITCHML_CALL_TIMEOUT_MS)
RANK_DEATH_WORLD = 3  # the rank-death runs: 3 ranks, the last one is killed


# ---------------------------------------------------------------- parent side

def parent(args):
    def body(tmpdir):
        switch, controller = start_switch(args.switchml, tmpdir)
        try:
            if args.mode == "suite":
                ok = run_suite(args, tmpdir, controller)
            elif args.mode == "matrix":
                ok = run_matrix(args, tmpdir, controller)
            else:
                ok = run_torchrun(args, tmpdir, controller)
        finally:
            stop_switch(switch)
        if not ok:
            print_switch_log(tmpdir)
        return ok
    return parent_main(args, "switchml_pytorch_", body)


def run_suite(args, tmpdir, controller):
    init = "file://" + os.path.join(tmpdir, "store")
    cmds = []
    for rank in range(2):
        env = base_env(args.pythonpath)
        if rank == 0:  # rank 1 must get the address through the store
            env["SWITCHML_CONTROLLER"] = controller
        cmds.append((worker_cmd(__file__, "worker-suite", rank, 2, init, args), env))
    ok = report(run_processes(cmds, tmpdir, WORKER_TIMEOUT_S, "suite"), "suite worker")

    # Stream semantics: 3 ranks, chained async all-reduces on one tensor, on a switch of their own.
    stream_dir = os.path.join(tmpdir, "stream")
    os.makedirs(stream_dir)
    ok = run_with_switch(args, stream_dir, __file__, "worker-stream", "stream", world=3,
                         log_label="stream ") and ok

    # The same over mutual TLS (docs/operations.md "Securing"): the switch serves TLS only, so
    # the backend must take SWITCHML_TLS_* from the environment to reach it at all.
    ok = run_tls(args, tmpdir) and ok

    # No controller address anywhere: a clear error, not a hang or a crash.
    init1 = "file://" + os.path.join(tmpdir, "store1")
    cmd = (worker_cmd(__file__, "worker-no-controller", 0, 1, init1, args), base_env(args.pythonpath))
    ok = report(run_processes([cmd], tmpdir, 60, "nocontroller"), "no-controller") and ok

    # Rank 1 routes half precision differently from rank 0: a ValueError naming both settings
    # on rank 1; rank 0 fails too (its registration waits for rank 1 until its deadline).
    init2 = "file://" + os.path.join(tmpdir, "store2")
    cmds = []
    for rank in range(2):
        env = base_env(args.pythonpath)  # SWITCHML_HALF_VIA_SWITCH=1
        env["SWITCHML_CONTROLLER"] = controller
        if rank == 1:
            env["SWITCHML_HALF_VIA_SWITCH"] = "0"
        cmds.append((worker_cmd(__file__, "worker-settings-mismatch", rank, 2, init2, args), env))
    ok = report(run_processes(cmds, tmpdir, WORKER_TIMEOUT_S, "mismatch"), "settings-mismatch") and ok

    # SWITCHML_FAILOVER differs: every rank raises at once, naming every rank's value.
    init3 = "file://" + os.path.join(tmpdir, "store3")
    cmds = []
    for rank in range(2):
        env = base_env(args.pythonpath)
        env["SWITCHML_CONTROLLER"] = controller
        env["SWITCHML_FAILOVER"] = "1" if rank == 0 else "0"
        cmds.append((worker_cmd(__file__, "worker-failover-mismatch", rank, 2, init3, args), env))
    ok = report(run_processes(cmds, tmpdir, WORKER_TIMEOUT_S, "failover_mismatch"), "failover-mismatch") and ok
    return ok


def run_tls(args, tmpdir):
    tls_dir = os.path.join(tmpdir, "tls")
    pki = os.path.join(tls_dir, "pki")
    os.makedirs(tls_dir)
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "lib.sh")
    made = subprocess.run(["bash", "-c", 'source "$1" && sml_make_pki "$2"', "bash", lib, pki],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print(f"FAIL: openssl (sml_make_pki): {made.stdout}{made.stderr}")
        return False
    p = lambda name: os.path.join(pki, name)
    return run_with_switch(args, tls_dir, __file__, "worker-stream", "tls", world=2, log_label="tls ",
                           switch_args=("--tls-cert", p("switch.pem"), "--tls-key", p("switch.key"),
                                        "--tls-client-ca", p("ca.pem")),
                           env_extra={"SWITCHML_TLS_CA": p("ca.pem"), "SWITCHML_TLS_CERT": p("client.pem"),
                                      "SWITCHML_TLS_KEY": p("client.key")})


def run_matrix(args, tmpdir, controller):
    """Mode `matrix`: comm hooks, the collective/dtype/op matrix, ZeRO and FSDP over 2 ranks on
    the parent's switch; then the switch-death run and the rank-death runs, each on a switch of
    its own."""
    init = "file://" + os.path.join(tmpdir, "store_matrix")
    env = base_env(args.pythonpath)
    env["SWITCHML_CONTROLLER"] = controller
    cmds = [(worker_cmd(__file__, "worker-matrix", rank, 2, init, args), env) for rank in range(2)]
    results = run_processes(cmds, tmpdir, MATRIX_TIMEOUT_S, "matrix")
    ok = report(results, "matrix worker")
    ok = check_fallback_log_once(results) and ok
    ok = run_switch_death(args, os.path.join(tmpdir, "death")) and ok
    for how in ("job", "session"):
        ok = run_rank_death(args, os.path.join(tmpdir, f"rank_death_{how}"), how) and ok
    return ok


def check_fallback_log_once(results):
    """Every all-reduce fallback reason a worker used (its final stats()) was logged exactly once
    on its stderr; unused reasons not at all."""
    ok = True
    for rank, (rc, out) in enumerate(results):
        lines = [ln for ln in out.splitlines() if ln.startswith("STATS ")]
        if len(lines) != 1:
            print(f"parent: FAIL matrix worker {rank} printed no STATS line")
            ok = False
            continue
        stats = json.loads(lines[0][len("STATS "):])
        used = 0
        for key, count in sorted(stats.items()):
            if not key.startswith("fallback_") or key == "fallback_allreduces":
                continue
            n = sum(1 for ln in out.splitlines()
                    if "goes to the inner Gloo group" in ln and f'stats()["{key}"]' in ln)
            good = n == (1 if count > 0 else 0)
            used += count > 0
            if not good or count > 0:
                print(f"parent: {'ok  ' if good else 'FAIL'} rank {rank}: {key} = {count}, logged {n} time(s)")
            ok = ok and good
        if used < 8:
            print(f"parent: FAIL rank {rank}: the matrix used only {used} fallback reasons")
            ok = False
    return ok


def kill_between_calls(args, tmpdir, mode, world, env, kill, what):
    """Starts `world` workers of `mode` (a file:// store in tmpdir). Once every rank has created
    done.rank<R> in tmpdir (it finished the calls that come before the kill), kill() runs, then
    the file `killed` tells the ranks (it also releases them if the kill did not happen: the
    run then fails). No timing matters: the kill happens between two calls, by construction.
    Returns (whether kill() ran, [(returncode, output)] of every rank)."""
    init = "file://" + os.path.join(tmpdir, "store")
    procs = [spawn(worker_cmd(__file__, mode, rank, world, init, args), env, tmpdir, f"{mode}_{rank}")
             for rank in range(world)]
    deadline = time.time() + WORKER_TIMEOUT_S  # hang guard only
    done = [os.path.join(tmpdir, f"done.rank{r}") for r in range(world)]
    while not all(os.path.exists(f) for f in done):
        if time.time() > deadline or any(p.poll() is not None for p, _ in procs):
            break
        time.sleep(0.05)
    killed = all(os.path.exists(f) for f in done)
    if killed:
        kill(procs)
        print(f"parent: killed {what} after every rank finished call {DEATH_CALLS - 1}")
    else:
        print(f"parent: FAIL the ranks did not all finish the calls before the kill of {what}")
    open(os.path.join(tmpdir, "killed"), "w").close()
    return killed, collect(procs, deadline)


def run_switch_death(args, tmpdir):
    """2 ranks make all-reduce calls; after both finished call DEATH_CALLS - 1, the parent kills
    the switch (SIGKILL): every later SwitchML call must fail on every rank with an error naming
    the cause, and the processes exit cleanly."""
    os.makedirs(tmpdir)
    switch, controller = start_switch(args.switchml, tmpdir)
    killed = False
    try:
        env = base_env(args.pythonpath)
        env["SWITCHML_CONTROLLER"] = controller
        env["SWITCHML_CALL_TIMEOUT_MS"] = str(DEATH_CALL_TIMEOUT_MS)
        env["SWITCHML_FAILOVER"] = "0"  # the failure itself (test_failover.py: surviving it)

        def kill(_):
            switch.kill()
            switch.wait()
        killed, results = kill_between_calls(args, tmpdir, "worker-switch-death", 2, env, kill, "the switch")
        ok = report(results, "switch-death worker") and killed
    finally:
        if not killed:
            stop_switch(switch)
    if not ok:
        print_switch_log(tmpdir, "switch-death ")
    return ok


def run_rank_death(args, tmpdir, how):
    """RANK_DEATH_WORLD ranks make all-reduce calls; after all finished call DEATH_CALLS - 1, the
    parent kills the last rank (SIGKILL): the next all-reduce of every other rank must fail
    with a RuntimeError naming that rank (the switch has had no datagram from it), after
    SWITCHML_CALL_TIMEOUT_MS (the hang guard is the only deadline), and they exit cleanly.
    how = "job": the ranks join a JobService job (`switchml jobs create`; SWITCHML_JOB_ID and
    SWITCHML_JOB_TOKEN), whose token lets them read its per-rank state. how = "session": the
    default, job 0 (the reference session), whose per-rank state only the operator may read: the
    ranks' environment holds the operator credential (SWITCHML_OPERATOR_TOKEN)."""
    import secrets
    import subprocess
    os.makedirs(tmpdir)
    operator_token = secrets.token_hex(16)
    switch_env = dict(os.environ, SWITCHML_OPERATOR_TOKEN=operator_token)
    switch, controller = start_switch(args.switchml, tmpdir, env=switch_env)
    ok = False
    try:
        env = base_env(args.pythonpath)
        for key in ("SWITCHML_OPERATOR_TOKEN", "SWITCHML_JOB_ID", "SWITCHML_JOB_TOKEN"):
            env.pop(key, None)
        env["SWITCHML_CONTROLLER"] = controller
        env["SWITCHML_CALL_TIMEOUT_MS"] = str(DEATH_CALL_TIMEOUT_MS)
        if how == "job":
            r = subprocess.run([args.switchml, "jobs", "create", "--controller", controller, "--workers",
                                str(RANK_DEATH_WORLD), "--window", "256"], env=switch_env,
                               capture_output=True, text=True, timeout=60)
            for line in r.stdout.splitlines():
                key, _, value = line.partition("=")
                if key in ("SWITCHML_JOB_ID", "SWITCHML_JOB_TOKEN"):
                    env[key] = value
            print(f"parent: switchml jobs create: exit {r.returncode}, job {env.get('SWITCHML_JOB_ID')} "
                  f"{r.stderr.strip()}")
            if r.returncode != 0 or "SWITCHML_JOB_TOKEN" not in env:
                return False
        else:
            env["SWITCHML_OPERATOR_TOKEN"] = operator_token
        victim = RANK_DEATH_WORLD - 1

        def kill(procs):
            procs[victim][0].kill()
            procs[victim][0].wait()
        killed, results = kill_between_calls(args, tmpdir, "worker-rank-death", RANK_DEATH_WORLD, env, kill,
                                             f"rank {victim} ({how})")
        survivors, (victim_rc, victim_out) = results[:victim], results[victim]
        ok = report(survivors, f"rank-death ({how}) survivor") and killed
        print(f"----- rank-death ({how}) rank {victim}: exit {victim_rc} (SIGKILL expected: {-9})")
        print(victim_out.rstrip())
        if victim_rc != -9:
            print(f"parent: FAIL rank {victim} was not the one killed (exit {victim_rc})")
            ok = False
    finally:
        stop_switch(switch)
        if not ok:
            print_switch_log(tmpdir, f"rank-death ({how}) ")
    return ok


def run_torchrun(args, tmpdir, controller):
    env = base_env(args.pythonpath)
    env["SWITCHML_CONTROLLER"] = controller
    env.pop("SWITCHML_HALF_VIA_SWITCH")  # the default: float16/bfloat16 go to Gloo
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           os.path.abspath(__file__), "worker-torchrun", *pythonpath_args(args)]
    return report(run_processes([(cmd, env)], tmpdir, WORKER_TIMEOUT_S, "torchrun"), "torchrun")


# ---------------------------------------------------------------- worker side

def worker_suite(args):
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
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
    c.check(not switchml_torch.config_from_env({}).half_via_switch
            and switchml_torch.config_from_env({"SWITCHML_HALF_VIA_SWITCH": "1"}).half_via_switch,
            "SWITCHML_HALF_VIA_SWITCH: off by default, 1 turns it on")
    c.raises(lambda: switchml_torch.config_from_env({"SWITCHML_HALF_VIA_SWITCH": "yes"}), ValueError,
             "SWITCHML_HALF_VIA_SWITCH must be 0 or 1", "SWITCHML_HALF_VIA_SWITCH=yes is refused, naming it")

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
                      (torch.int64, R.SUM, "dtype_int64"), (torch.uint8, R.SUM, "dtype_uint8"),
                      (torch.bfloat16, R.MAX, "op_max"), (torch.bool, R.BOR, "op_bor"),
                      (torch.bool, R.SUM, "dtype_bool")]
    for i, (dtype, op, reason) in enumerate(fallback_cases):
        if dtype.is_floating_point:
            x = rank_data(rank, 3000, torch.float64, 90 + i).to(dtype)
            if op == R.PRODUCT:
                x = 1 + x / 100  # a product of values near 1 stays finite
        elif dtype == torch.bool:
            x = rank_data(rank, 3000, torch.int32, 90 + i) % 2 == 0
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
    c.raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16), op=R.MAX), TypeError, "int16",
             "int16 MAX (Gloo has no int16) raises at the call")
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

    return finish_worker(c)


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
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
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

    return finish_worker(c)


def ddp_train(rank, group, steps, hook=None, state=None, first_bucket_bytes=1024):
    """Trains a small MLP with DDP over `group` (None = default group), with comm hook `hook`
    (and its state) if given; returns (final, initial) params. first_bucket_bytes: DDP's first
    bucket (it reads its size from a module attribute, set for the whole process; None: leave
    it), with tiny buckets after it: several allreduces in flight per step."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1234)  # same initial model everywhere (DDP also broadcasts it)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    initial = [p.detach().clone() for p in model.parameters()]
    if first_bucket_bytes is not None:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first_bucket_bytes
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.5)
    train_steps(rank, ddp, opt, steps, seed=99)  # different data on each rank
    return [p.detach().clone() for p in model.parameters()], initial


def worker_no_controller(args):
    use_pythonpath(args)
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    c = Checker(0)
    c.raises(lambda: dist.init_process_group("switchml", init_method=args.init, rank=0, world_size=1,
                                             timeout=datetime.timedelta(seconds=20)),
             RuntimeError, "SWITCHML_CONTROLLER", "init without SWITCHML_CONTROLLER fails with a clear message")
    return 1 if c.failures else 0


def worker_settings_mismatch(args):
    """Rank 1's SWITCHML_HALF_VIA_SWITCH differs from rank 0's: group creation must fail on rank 1
    with a ValueError naming both values, and on rank 0 with an error (no hang: the hang guard)."""
    use_pythonpath(args)
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    c = Checker(args.rank)
    start = time.monotonic()

    def init():
        dist.init_process_group("switchml", init_method=args.init, rank=args.rank, world_size=args.world,
                                timeout=datetime.timedelta(seconds=20))
    if args.rank == 1:
        c.raises(init, ValueError, "rank 1 has SWITCHML_HALF_VIA_SWITCH=0 SWITCHML_STAGING_CHUNK_BYTES=0 "
                 "SWITCHML_REJOIN=1 but rank 0 has SWITCHML_HALF_VIA_SWITCH=1 "
                 "SWITCHML_STAGING_CHUNK_BYTES=0 SWITCHML_REJOIN=1",
                 "a rank whose SWITCHML_HALF_VIA_SWITCH differs from rank 0's cannot create the group")
    else:
        c.raises(init, (RuntimeError, ValueError), "switchml",
                 "rank 0 fails too when rank 1 refused to join")
    print(f"rank {args.rank}: failed after {time.monotonic() - start:.1f} s (not checked: timing)", flush=True)
    return 1 if c.failures else 0


def worker_failover_mismatch(args):
    use_pythonpath(args)
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    c = Checker(args.rank)
    c.raises(lambda: dist.init_process_group("switchml", init_method=args.init, rank=args.rank,
                                             world_size=args.world, timeout=datetime.timedelta(seconds=20)),
             ValueError, "SWITCHML_FAILOVER differs between ranks (rank 0: 1, rank 1: 0)",
             "every rank refuses a group whose ranks disagree on SWITCHML_FAILOVER")
    return 1 if c.failures else 0


def worker_torchrun(args):
    use_pythonpath(args)
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
    # By default float16/bfloat16 go to the inner Gloo group (faster for them than the switch's
    # 4 bytes per element), counted per dtype; small integers are exact in both.
    before = switchml.torch.stats()
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.full((5000,), float(rank + 1), dtype=dtype)
        dist.all_reduce(x)
        c.check(torch.equal(x, torch.full((5000,), 3.0, dtype=dtype)), f"torchrun: {dtype} allreduce exact (Gloo)")
    after = switchml.torch.stats()
    c.check(after["fallback_dtype_float16"] == before["fallback_dtype_float16"] + 1
            and after["fallback_dtype_bfloat16"] == before["fallback_dtype_bfloat16"] + 1
            and after["calls_submitted"] == before["calls_submitted"],
            "torchrun: float16 and bfloat16 went to the inner Gloo group by default, counted, no SwitchML call")
    params, initial = ddp_train(rank, None, steps=5)
    flat = torch.cat([p.flatten() for p in params])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    c.check(all(torch.equal(g, gathered[0]) for g in gathered) and max_err(params[0], initial[0]) > 0,
            "torchrun: DDP parameters trained and identical on both ranks")
    return finish_worker(c)


# ---------------------------------------------------------------- worker side: matrix mode

def worker_matrix(args):
    """Mode `matrix`, one rank of 2: each scenario in its own function."""
    c = init_worker(args)
    import torch.distributed as dist
    import switchml.torch as switchml_torch

    rank, world = args.rank, args.world
    pg = switchml_torch.backend()
    gloo = dist.new_group(backend="gloo")
    check_allreduce_matrix(c, pg, gloo)
    check_collective_matrix(c, pg, gloo)
    check_comm_hooks(c, pg, gloo)
    check_zero(c, pg, gloo)
    check_fsdp1(c, pg, gloo)
    check_fsdp2(c, pg, gloo)
    print("STATS " + json.dumps(pg.stats()), flush=True)  # the parent checks the log lines against it
    return finish_worker(c)


MATRIX_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool", "int16")


def matrix_input(rank, dtype, n, seed, op_name="SUM"):
    """Rank `rank`'s input of one matrix cell: values whose reduction stays in range."""
    import torch
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64)
        x = 1 + x / 100 if op_name == "PRODUCT" else x * 3
        return x.to(dtype)
    lo, hi = {torch.uint8: (0, 100), torch.int8: (-60, 60), torch.int16: (-1000, 1000)}.get(dtype, (-2**20, 2**20))
    if op_name == "PRODUCT":
        lo, hi = (0, 8) if dtype == torch.uint8 else (-8, 8)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def outcome(fn):
    """("ok", value) or ("err", exception) of fn()."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 (every error is a cell outcome)
        return "err", e


def first_line(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def print_matrix(rank, title, rows, cols, cells):
    """cells[(row, col)] = short text; rank 0 prints the table."""
    if rank != 0:
        return
    width = max(8, max(len(v) for v in cells.values()) + 1)
    lw = max(len(r) for r in rows) + 1
    print(f"rank 0: {title}", flush=True)
    print("rank 0:   " + " " * lw + "".join(f"{col:<{width}}" for col in cols), flush=True)
    for r in rows:
        print("rank 0:   " + f"{r:<{lw}}" + "".join(f"{cells.get((r, col), '-'):<{width}}" for col in cols), flush=True)


def check_allreduce_matrix(c, pg, gloo):
    """all_reduce with every op x dtype on switchml and on the Gloo group. Each cell is one of
    SML (through SwitchML: SUM/AVG of float32, int32, float16, bfloat16; within the quantization
    tolerance of Gloo's result, one SwitchML call, no fallback count), gloo (the inner Gloo group:
    identical to Gloo's result, counted once under the right fallback reason, no SwitchML call),
    err (raises at the call, naming the op or the dtype, and Gloo cannot do it either). Never a
    different result, never a hang (the parent's deadline)."""
    import torch
    import torch.distributed as dist
    R = dist.ReduceOp
    rank, world = c.rank, pg.size()
    ops = [("SUM", R.SUM), ("AVG", R.AVG), ("MAX", R.MAX), ("MIN", R.MIN), ("PRODUCT", R.PRODUCT),
           ("BAND", R.BAND), ("BOR", R.BOR), ("BXOR", R.BXOR), ("PREMUL_SUM", dist._make_nccl_premul_sum(2.0))]
    sml_ok = {"float32", "int32", "float16", "bfloat16"}
    cells = {}
    n = 3000
    for di, dname in enumerate(MATRIX_DTYPES):
        dtype = getattr(torch, dname)
        for oi, (oname, op) in enumerate(ops):
            x = matrix_input(rank, dtype, n, 200 + 10 * di + oi, oname)
            y = x.clone()
            g_kind, g_val = outcome(lambda: dist.all_reduce(y, op=op, group=gloo))
            before = pg.stats()
            s_kind, s_val = outcome(lambda: dist.all_reduce(x, op=op))
            after = pg.stats()
            calls = after["calls_submitted"] - before["calls_submitted"]
            falls = {k: after[k] - before[k] for k in after if k.startswith("fallback_") and after[k] != before[k]}
            what = f"all_reduce {oname} of {dname}"
            if s_kind == "err":
                cell = "err"
                msg = str(s_val)
                good = (g_kind == "err" and (oname in msg or dname in msg) and calls == 0 and not falls)
                c.check(good, f"{what}: raises at the call naming the op or dtype ({first_line(s_val)})"
                        + ("" if g_kind == "err" else " although Gloo can do it"))
            elif calls > 0:
                cell = "SML"
                e = max_err(x, y) if g_kind == "ok" else float("inf")
                good = (g_kind == "ok" and dname in sml_ok and oname in ("SUM", "AVG") and x.dtype == dtype
                        and sml_close(x, y, dtype) and calls == 1 and not falls)
                c.check(good, f"{what}: through SwitchML ({calls} call), within the quantization tolerance "
                        f"of Gloo's result (max difference {e:.3g}), no fallback")
            else:
                cell = "gloo"
                reason = f"fallback_op_{oname.lower()}" if oname not in ("SUM", "AVG") else f"fallback_dtype_{dname}"
                same = g_kind == "ok" and x.dtype == dtype and torch.equal(x, y)
                good = same and falls == {"fallback_allreduces": 1, reason: 1}
                c.check(good, f"{what}: inner Gloo group, identical to Gloo's result ({same}), counted {falls}")
            cells[(dname, oname)] = cell + ("" if good else "!")
    print_matrix(rank, "all_reduce matrix (SML = SwitchML, gloo = inner Gloo group, err = raises at the call; "
                 "! = check failed)", MATRIX_DTYPES, [o for o, _ in ops], cells)


def check_collective_matrix(c, pg, gloo):
    """Every other collective the backend offers, for every dtype, on switchml and on the Gloo
    group: delegated (identical results, no SwitchML call) or, where Gloo refuses it, an error
    at the call naming the collective or the dtype."""
    import torch
    import torch.distributed as dist
    rank, world = c.rank, pg.size()
    other = 1 - rank

    def collectives(dtype, seed):
        def inp(r=rank, n=6, k=0):
            return matrix_input(r, dtype, n, seed + k)

        def empty(n=6):
            return torch.zeros(n, dtype=dtype)

        def broadcast(group):
            t = inp()
            dist.broadcast(t, src=1, group=group)
            return [t]

        def all_gather(group):
            outs = [empty() for _ in range(world)]
            dist.all_gather(outs, inp(), group=group)
            return outs

        def all_gather_into_tensor(group):
            out = empty(6 * world)
            dist.all_gather_into_tensor(out, inp(), group=group)
            return [out]

        def all_gather_coalesced(group):
            outs = [[empty(), empty(3)] for _ in range(world)]
            dist.all_gather_coalesced(outs, [inp(), inp(n=3, k=1)], group=group)
            return [t for lst in outs for t in lst]

        def coalesced_all_gather_into_tensor(group):
            outs = [empty(6 * world), empty(3 * world)]
            with dist._coalescing_manager(group=group, async_ops=True) as cm:
                dist.all_gather_into_tensor(outs[0], inp(), group=group, async_op=True)
                dist.all_gather_into_tensor(outs[1], inp(n=3, k=1), group=group, async_op=True)
            cm.wait()
            return outs

        def reduce(group):
            t = inp()
            dist.reduce(t, dst=0, group=group)
            return [t] if rank == 0 else []

        def reduce_max(group):
            t = inp()
            dist.reduce(t, dst=1, op=dist.ReduceOp.MAX, group=group)
            return [t] if rank == 1 else []

        def reduce_scatter(group):
            out = empty()
            dist.reduce_scatter(out, [inp(k=i) for i in range(world)], group=group)
            return [out]

        def reduce_scatter_tensor(group):
            out = empty()
            dist.reduce_scatter_tensor(out, inp(n=6 * world), group=group)
            return [out]

        def coalesced_reduce_scatter_tensor(group):
            outs = [empty(), empty(3)]
            with dist._coalescing_manager(group=group, async_ops=True) as cm:
                dist.reduce_scatter_tensor(outs[0], inp(n=6 * world), group=group, async_op=True)
                dist.reduce_scatter_tensor(outs[1], inp(n=3 * world, k=1), group=group, async_op=True)
            cm.wait()
            return outs

        def all_to_all(group):
            outs = [empty() for _ in range(world)]
            dist.all_to_all(outs, [inp(k=i) for i in range(world)], group=group)
            return outs

        def all_to_all_single(group):
            out = empty(6 * world)
            dist.all_to_all_single(out, inp(n=6 * world), group=group)
            return [out]

        def all_to_all_single_splits(group):
            # rank r sends r + 1 elements to rank 0 and 3 to rank 1
            send = [rank + 1, 3]
            recv = [r + 1 for r in range(world)] if rank == 0 else [3] * world
            out = empty(sum(recv))
            dist.all_to_all_single(out, inp(n=sum(send)), recv, send, group=group)
            return [out]

        def gather(group):
            outs = [empty() for _ in range(world)] if rank == 0 else None
            dist.gather(inp(), outs, dst=0, group=group)
            return outs or []

        def gather_single(group):
            out = empty(6 * world) if rank == 0 else None
            dist.gather_single(inp(), out, dst=0, group=group)
            return [out] if rank == 0 else []

        def scatter(group):
            out = empty()
            dist.scatter(out, [inp(k=i) for i in range(world)] if rank == 1 else None, src=1, group=group)
            return [out]

        def send_recv(group):
            t = inp()
            r = empty()
            if rank == 0:
                dist.send(t, dst=1, group=group)
                dist.recv(r, src=1, group=group)
            else:
                dist.recv(r, src=0, group=group)
                dist.send(t, dst=0, group=group)
            return [r]

        def recv_any_source(group):
            r = empty()
            if rank == 0:
                src = dist.recv(r, group=group)
                return [r, torch.tensor([src])]
            dist.send(inp(), dst=0, group=group)
            return []

        def batch_isend_irecv(group):
            r = empty()
            ops = [dist.P2POp(dist.isend, inp(), other, group), dist.P2POp(dist.irecv, r, other, group)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [r]

        return [("broadcast", broadcast), ("all_gather", all_gather),
                ("all_gather_into_tensor", all_gather_into_tensor), ("all_gather_coalesced", all_gather_coalesced),
                ("all_gather_into_tensor coalesced", coalesced_all_gather_into_tensor),
                ("reduce", reduce), ("reduce MAX", reduce_max), ("reduce_scatter", reduce_scatter),
                ("reduce_scatter_tensor", reduce_scatter_tensor),
                ("reduce_scatter_tensor coalesced", coalesced_reduce_scatter_tensor),
                ("all_to_all", all_to_all), ("all_to_all_single", all_to_all_single),
                ("all_to_all_single splits", all_to_all_single_splits), ("gather", gather),
                ("gather_single", gather_single), ("scatter", scatter), ("send/recv", send_recv),
                ("recv any source", recv_any_source), ("batch_isend_irecv", batch_isend_irecv)]

    import warnings
    warnings.filterwarnings("ignore", message=".*all_gather_coalesced.*")
    cells = {}
    names = [n for n, _ in collectives(torch.float32, 0)]
    for di, dname in enumerate(MATRIX_DTYPES):
        dtype = getattr(torch, dname)
        for ci, (cname, fn) in enumerate(collectives(dtype, 500 + 50 * di)):
            g_kind, g_val = outcome(lambda: fn(gloo))
            before = pg.stats()
            s_kind, s_val = outcome(lambda: fn(None))
            after = pg.stats()
            quiet = after["calls_submitted"] == before["calls_submitted"] and \
                after["fallback_allreduces"] == before["fallback_allreduces"]
            what = f"{cname} of {dname}"
            if s_kind == "ok":
                same = g_kind == "ok" and len(s_val) == len(g_val) and all(
                    a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(s_val, g_val))
                good = same and quiet
                cell = "gloo"
                c.check(good, f"{what}: delegated to Gloo, identical to Gloo's result ({same}), "
                        f"no SwitchML call ({quiet})")
            else:
                msg = str(s_val)
                named = cname.split()[0] in msg or dname in msg
                good = g_kind == "err" and named and quiet
                cell = "err"
                c.check(good, f"{what}: raises at the call naming the collective or dtype ({first_line(s_val)}"
                        + (")" if g_kind == "err" else f") although Gloo can do it"))
            cells[(dname, cname)] = cell + ("" if good else "!")
    # barrier and monitored_barrier have no tensors.
    before = pg.stats()["calls_submitted"]
    kinds = [outcome(lambda: dist.barrier())[0], outcome(lambda: dist.monitored_barrier(
        timeout=datetime.timedelta(seconds=60)))[0]]
    c.check(kinds == ["ok", "ok"] and pg.stats()["calls_submitted"] == before,
            f"barrier and monitored_barrier run on the Gloo group ({kinds})")
    if rank == 0:
        print("rank 0: collective matrix (gloo = delegated, identical to Gloo; err = raises at the call, "
              "as Gloo does; ! = check failed):", flush=True)
        for cname in names:
            print(f"rank 0:   {cname:<34}" + " ".join(f"{d}={cells[(d, cname)]}" for d in MATRIX_DTYPES), flush=True)


def sml_close(x, y, dtype):
    """x (through SwitchML) within the quantization tolerance of y (Gloo's): int32 exact, float32
    within 1e-5 (|values| < 64), the 16-bit floats within one rounding step of their own."""
    import torch
    if dtype == torch.int32:
        return torch.equal(x, y)
    d = (x.to(torch.float64) - y.to(torch.float64)).abs()
    if dtype == torch.float32:
        return bool((d <= 1e-5).all())
    rel = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10  # one step of the dtype, relative
    return bool((d <= rel * y.to(torch.float64).abs() + 1e-6).all())


def hook_train(rank, group, hook, state, steps=10):
    """A small MLP trained with DDP over `group` (None = default) with comm hook `hook`."""
    return ddp_train(rank, group, steps, hook, state, first_bucket_bytes=None)


def identical_on_all_ranks(params, gloo):
    import torch
    import torch.distributed as dist
    flat = torch.cat([p.flatten() for p in params])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size(gloo))]
    dist.all_gather(gathered, flat, group=gloo)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def check_comm_hooks(c, pg, gloo):
    """DDP with register_comm_hook: a custom hook (all_reduce async, get_future().then(divide by
    the world size)) and torch's allreduce_hook, fp16_compress_hook and bf16_compress_hook. Each
    trains 10 steps over switchml and the same over Gloo: parameters within tolerance, identical
    on every rank, and the gradients went through SwitchML (calls counted, no fallback)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def divide_hook(group, bucket):
        world = dist.get_world_size(group)
        fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))

    # Tolerances after 10 steps (lr 0.1): float32 gradients differ from Gloo's by the quantization
    # error (~1e-9); the compressed ones by one rounding step of the 16-bit value whenever the
    # exact sum lies near a rounding boundary (SwitchML rounds its float32 sum once, Gloo its own).
    hooks = [("custom all_reduce().get_future().then(div)", divide_hook, 1e-4),
             ("allreduce_hook", default_hooks.allreduce_hook, 1e-4),
             ("fp16_compress_hook", default_hooks.fp16_compress_hook, 1e-3),
             ("bf16_compress_hook", default_hooks.bf16_compress_hook, 1e-2)]
    for name, hook, tol in hooks:
        before = pg.stats()
        p_sw, p_init = hook_train(c.rank, None, hook, None)
        after = pg.stats()
        p_gloo, _ = hook_train(c.rank, gloo, hook, gloo)
        calls = after["calls_completed"] - before["calls_completed"]
        falls = after["fallback_allreduces"] - before["fallback_allreduces"]
        diff = max(max_err(a, b) for a, b in zip(p_sw, p_gloo))
        moved = max(max_err(a, b) for a, b in zip(p_sw, p_init))
        c.check(calls >= 10 and falls == 0 and after["calls_failed"] == before["calls_failed"],
                f"DDP comm hook {name}: gradients through SwitchML ({calls} calls in 10 steps, {falls} fallbacks)")
        c.check(moved > 1e-2 and diff <= tol,
                f"... trained (moved {moved:.3g}) as over Gloo: max difference {diff:.3g} <= {tol}")
        c.check(identical_on_all_ranks(p_sw, gloo), "... parameters identical on every rank")


def small_model():
    import torch
    from torch import nn
    torch.manual_seed(4321)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def train_steps(rank, model, opt, steps, seed=77):
    """`steps` SGD steps of model (16 -> 4) on random data of this rank (seed + rank)."""
    import torch
    g = torch.Generator().manual_seed(seed + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()


def check_zero(c, pg, gloo):
    """ZeroRedundancyOptimizer (Adam, each rank owns half the parameters and broadcasts them)
    around DDP: over switchml (gradients through SwitchML, the broadcasts delegated to Gloo) as
    over Gloo."""
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run(group):
        model = small_model()
        ddp = DDP(model, process_group=group)
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                      process_group=group)
        train_steps(c.rank, ddp, opt, 8)
        return [p.detach().clone() for p in model.parameters()]

    before = pg.stats()
    p_sw = run(None)
    after = pg.stats()
    p_gloo = run(gloo)
    diff = max(max_err(a, b) for a, b in zip(p_sw, p_gloo))
    moved = max(max_err(a, b) for a, b in zip(p_sw, [p.detach() for p in small_model().parameters()]))
    calls = after["calls_completed"] - before["calls_completed"]
    c.check(calls >= 8 and after["fallback_allreduces"] == before["fallback_allreduces"],
            f"ZeroRedundancyOptimizer + DDP: gradients through SwitchML ({calls} calls)")
    c.check(moved > 1e-2 and diff <= 1e-4, f"... trained 8 steps (moved {moved:.3g}) as over Gloo "
            f"(max difference {diff:.3g})")
    c.check(identical_on_all_ranks(p_sw, gloo), "... parameters identical on every rank")


def full_params_fsdp1(model):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.summon_full_params(model):
        return [p.detach().clone() for p in model.parameters()]


def check_fsdp1(c, pg, gloo):
    """FSDP (FullyShardedDataParallel, FULL_SHARD, CPU): its all_gather_into_tensor and
    reduce_scatter_tensor are delegated to Gloo; the same run over Gloo gives the same result."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def run(group):
        model = FSDP(small_model(), process_group=group, device_id=torch.device("cpu"), use_orig_params=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        train_steps(c.rank, model, opt, 8)
        return full_params_fsdp1(model)

    before = pg.stats()
    p_sw = run(None)
    after = pg.stats()
    p_gloo = run(gloo)
    check_sharded(c, "FSDP (FullyShardedDataParallel)", p_sw, p_gloo, before, after, gloo)


def check_fsdp2(c, pg, gloo):
    """FSDP2 (fully_shard per Linear and at the root, on a CPU device mesh over the group)."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def run(group):
        import torch.distributed as dist
        mesh = DeviceMesh.from_group(group if group is not None else dist.group.WORLD, "cpu")
        model = small_model()
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        train_steps(c.rank, model, opt, 8)
        return [p.full_tensor().detach().clone() for p in model.parameters()]

    before = pg.stats()
    p_sw = run(None)
    after = pg.stats()
    p_gloo = run(gloo)
    check_sharded(c, "FSDP2 (fully_shard)", p_sw, p_gloo, before, after, gloo)


def check_sharded(c, name, p_sw, p_gloo, before, after, gloo):
    import torch
    initial = [p.detach() for p in small_model().parameters()]
    moved = max(max_err(a, b) for a, b in zip(p_sw, initial))
    calls = after["calls_submitted"] - before["calls_submitted"]
    falls = after["fallback_allreduces"] - before["fallback_allreduces"]
    same = all(torch.equal(a, b) for a, b in zip(p_sw, p_gloo))
    diff = max(max_err(a, b) for a, b in zip(p_sw, p_gloo))
    # Its collectives are Gloo's: bit-identical, unless it all-reduces something (then SwitchML's
    # quantization tolerance).
    c.check(moved > 1e-2 and (same if calls == 0 else diff <= 1e-4),
            f"{name}: 8 steps over switchml (moved {moved:.3g}) {'identical to' if same else 'close to'} "
            f"the run over Gloo (max difference {diff:.3g}; {calls} SwitchML calls, {falls} all-reduce fallbacks)")
    c.check(identical_on_all_ranks(p_sw, gloo), "... full parameters identical on every rank")


# ---------------------------------------------------------------- worker side: switch or rank death

def calls_then_wait_for_kill(args, c):
    """DEATH_CALLS - 1 all-reduces that must be right; then done.rank<R> beside the store tells
    the parent (kill_between_calls), and this rank waits for its file `killed`."""
    import torch
    import torch.distributed as dist
    rank, world = args.rank, args.world
    for k in range(DEATH_CALLS - 1):
        x = torch.full((5000,), float(rank + k))
        dist.all_reduce(x)
        expected = world * k + world * (world - 1) // 2  # sum over the ranks of rank + k
        c.check(bool((x == expected).all()), f"call {k} before the kill is right")
    folder = os.path.dirname(args.init[len("file://"):])
    open(os.path.join(folder, f"done.rank{rank}"), "w").close()
    killed = os.path.join(folder, "killed")
    deadline = time.monotonic() + WORKER_TIMEOUT_S  # hang guard
    while not os.path.exists(killed):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the parent did not create {killed}")
        time.sleep(0.01)


def worker_switch_death(args):
    """One rank of the switch-death run (see run_switch_death): DEATH_CALLS - 1 good calls, then,
    once the parent has killed the switch, SwitchML calls that must fail on every rank naming the
    cause, Gloo collectives that still work, and a clean exit."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch  # noqa: F401

    rank, world = args.rank, args.world
    calls_then_wait_for_kill(args, c)

    # The switch is gone: three async calls (in place, float16 staged, AVG), then one more.
    start = time.monotonic()
    tensors = [torch.ones(5000), torch.ones(3000, dtype=torch.float16), torch.ones(70000)]
    works = [dist.all_reduce(tensors[0], async_op=True), dist.all_reduce(tensors[1], async_op=True),
             dist.all_reduce(tensors[2], op=dist.ReduceOp.AVG, async_op=True)]
    for i, w in enumerate(works):
        try:
            w.wait()
            c.check(False, f"all_reduce {i} pending when the switch died: did not raise")
        except RuntimeError as e:
            msg = str(e)
            # UNAVAILABLE: the switch is what failed (its controller, in the same process, does
            # not answer either), the code the integrations' fallback will key on.
            c.check("UNAVAILABLE: no result from switch" in msg and f"for {DEATH_CALL_TIMEOUT_MS} ms" in msg
                    and "does not answer either" in msg,
                    f"all_reduce {i} pending when the switch died fails naming the cause and the call timeout "
                    f"({msg.splitlines()[0]})")
    print(f"rank {rank}: the failures arrived {time.monotonic() - start:.1f} s after the calls "
          f"(SWITCHML_CALL_TIMEOUT_MS={DEATH_CALL_TIMEOUT_MS}; not checked: timing)", flush=True)
    c.raises(lambda: dist.all_reduce(torch.ones(10)), RuntimeError, "UNAVAILABLE",
             "a later all_reduce fails too, naming the original cause")
    # What runs on the inner Gloo group still works.
    x = torch.full((100,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(x)
    c.check(bool((x == 3).all()), "float64 all_reduce (Gloo fallback) still works")
    dist.barrier()
    c.check(True, "barrier still works")
    return finish_worker(c)


def worker_rank_death(args):
    """One rank of a rank-death run (see run_rank_death): DEATH_CALLS - 1 good calls; the last
    rank is then killed by the parent, and every other rank's next all-reduce must raise a
    RuntimeError naming it; a clean exit (no Gloo collective: the inner Gloo group has lost a
    rank too)."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist

    rank, world = args.rank, args.world
    calls_then_wait_for_kill(args, c)  # the last rank is killed while it waits here
    victim = world - 1
    start = time.monotonic()
    x = torch.ones(5000)
    try:
        dist.all_reduce(x)
        c.check(False, f"the all_reduce after rank {victim} was killed did not raise")
    except RuntimeError as e:
        msg = str(e)
        c.check("no result from switch" in msg and f"for {DEATH_CALL_TIMEOUT_MS} ms" in msg
                and f"the switch has had no datagram from rank {victim} (127.0.0.1)" in msg
                and "it may have died, stalled, or not made this call" in msg
                and f"rank {rank} (" not in msg,
                f"the all_reduce after rank {victim} was killed raises RuntimeError naming rank {victim} "
                f"(and not this rank): {msg}")
    print(f"rank {rank}: the failure arrived {time.monotonic() - start:.1f} s after the call "
          f"(SWITCHML_CALL_TIMEOUT_MS={DEATH_CALL_TIMEOUT_MS}; not checked: timing)", flush=True)
    return finish_worker(c)


WORKERS = {"worker-suite": worker_suite, "worker-stream": worker_stream, "worker-no-controller": worker_no_controller,
           "worker-settings-mismatch": worker_settings_mismatch, "worker-failover-mismatch": worker_failover_mismatch,
           "worker-torchrun": worker_torchrun, "worker-matrix": worker_matrix,
           "worker-switch-death": worker_switch_death, "worker-rank-death": worker_rank_death}


def main():
    return dispatch(arg_parser(["suite", "torchrun", "matrix", *WORKERS]), WORKERS, parent)


if __name__ == "__main__":
    sys.exit(main())
