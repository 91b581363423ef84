"""What the PyTorch backend's Python tests share (test_backend.py, test_staging.py, test_cuda.py
import it from this folder): the parent side (a switch on free ports, worker processes with a
hang guard, their report) and the worker side (joining the group, checks, test data).

  # parent
  def parent(args):
      return parent_main(args, "switchml_x_",
                         lambda tmpdir: run_with_switch(args, tmpdir, __file__, "worker", "x"))
  # worker
  def worker(args):
      c = init_worker(args)                 # sys.path, init_process_group("switchml"), a Checker
      import torch, torch.distributed as dist
      ...
      c.check(cond, "what")
      return finish_worker(c)               # destroy_process_group, "rank R: N failure(s)", exit code
  # main
  sys.exit(dispatch(arg_parser(["suite", "worker"]), {"worker": worker}, parent))
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

def start_switch(binary, tmpdir, env=None, controller_port=0, extra_args=()):
    """`switchml switch` on free ports (log and ready file in tmpdir; the controller on
    `controller_port` if not 0, e.g. to restart a switch where its workers look for it); returns
    (process, "127.0.0.1:<controller port>"). `env`: the switch's environment (default: this
    one's); `extra_args`: more flags (e.g. --tls-cert)."""
    ready = os.path.join(tmpdir, "switch.json")
    if os.path.exists(ready):
        os.remove(ready)
    log = open(os.path.join(tmpdir, "switch.log"), "a")
    proc = subprocess.Popen([binary, "switch", "--bind", "127.0.0.1", "--port", "0",
                             "--controller-port", str(controller_port), "--ready-file", ready, *extra_args],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
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


def print_switch_log(tmpdir, label=""):
    print(f"----- {label}switch log")
    print(open(os.path.join(tmpdir, "switch.log")).read().rstrip())


def stack_dump(pid):
    """The C++ stacks of every thread of a hung process (gdb, if installed), for the log."""
    import shutil
    if not shutil.which("gdb"):
        return "(no gdb: no stack dump)"
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=120)
        return "\n".join(ln for ln in r.stdout.splitlines() if ln.startswith(("#", "Thread")))
    except (subprocess.TimeoutExpired, OSError) as e:
        return f"(gdb failed: {e})"


def spawn(cmd, env, tmpdir, name):
    """Starts cmd with its output in tmpdir/<name>.log; returns (process, log file)."""
    out = open(os.path.join(tmpdir, f"{name}.log"), "w+")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), out


def collect(procs, deadline):
    """Waits for the spawned processes until `deadline` (time.time()); a process still running
    then is killed after a stack dump. Returns [(returncode, output)] (None = timed out)."""
    results = []
    for proc, out in procs:
        dump = ""
        try:
            rc = proc.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            dump = "\n----- stacks of the hung process\n" + stack_dump(proc.pid)
            proc.kill()
            proc.wait()
            rc = None
        out.seek(0)
        results.append((rc, out.read() + dump))
        out.close()
    return results


def run_processes(cmds_envs, tmpdir, timeout_s, tag):
    """Runs the commands concurrently; returns [(returncode, output)] (None = timed out)."""
    procs = [spawn(cmd, env, tmpdir, f"{tag}_{i}") for i, (cmd, env) in enumerate(cmds_envs)]
    return collect(procs, time.time() + timeout_s)


def pythonpath_args(args):
    """The --pythonpath to pass on to worker processes (none: the installed package)."""
    return ["--pythonpath", args.pythonpath] if args.pythonpath else []


def worker_cmd(script, mode, rank, world, init, args, *extra):
    """The command line of one worker process: `script mode --rank R --world N --init URL ...`."""
    return [sys.executable, os.path.abspath(script), mode, *extra, "--rank", str(rank), "--world", str(world),
            "--init", init, *pythonpath_args(args)]


def base_env(pythonpath):
    env = dict(os.environ)
    env.pop("SWITCHML_CONTROLLER", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # two workers + a switch share 2 cores
    # The suites check the switch path for float16/bfloat16 too (off by default: the torchrun
    # test checks that default, where they go to Gloo).
    env["SWITCHML_HALF_VIA_SWITCH"] = "1"
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


def run_with_switch(args, tmpdir, script, mode, tag, world=2, env_extra=None, extra=(),
                    timeout_s=WORKER_TIMEOUT_S, log_label="", switch_args=()):
    """`world` workers of `script mode` on a switch of their own in tmpdir (a file:// store
    there; SWITCHML_CONTROLLER and env_extra in every worker's environment; switch_args: the
    switch's extra flags); reports them and, if one failed, the switch's log. Returns whether
    every worker exited 0."""
    init = "file://" + os.path.join(tmpdir, "store")
    switch, controller = start_switch(args.switchml, tmpdir, extra_args=switch_args)
    try:
        env = base_env(args.pythonpath)
        env["SWITCHML_CONTROLLER"] = controller
        env.update(env_extra or {})
        cmds = [(worker_cmd(script, mode, rank, world, init, args, *extra), env) for rank in range(world)]
        ok = report(run_processes(cmds, tmpdir, timeout_s, tag), f"{tag} worker")
    finally:
        stop_switch(switch)
    if not ok:
        print_switch_log(tmpdir, log_label)
    return ok


def skip_without_torch():
    """True (after saying so) when this interpreter cannot import torch."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {sys.executable} cannot import torch ({e})")
        return True
    return False


def parent_main(args, prefix, body):
    """A parent's frame: SKIP without torch; body(tmpdir) in a fresh temporary directory;
    PASS/FAIL, and the exit code."""
    if skip_without_torch():
        return SKIP
    with tempfile.TemporaryDirectory(prefix=prefix) as tmpdir:
        ok = body(tmpdir)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


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


def use_pythonpath(args):
    """Puts --pythonpath (the built package) first on sys.path, once."""
    if args.pythonpath and sys.path[0] != args.pythonpath:
        sys.path.insert(0, args.pythonpath)


def init_worker(args, backend="switchml"):
    """A worker's start: --pythonpath, `import switchml.torch` (registers the backend),
    init_process_group(backend) over --init as --rank of --world (60 s timeout). Returns a
    Checker for this rank."""
    use_pythonpath(args)
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    dist.init_process_group(backend, init_method=args.init, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))
    return Checker(args.rank)


def finish_worker(c):
    """A worker's end: destroy_process_group, the failure count, the exit code."""
    import torch.distributed as dist
    dist.destroy_process_group()
    print(f"rank {c.rank}: {c.failures} failure(s)", flush=True)
    return 1 if c.failures else 0


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


# ---------------------------------------------------------------- command line

def arg_parser(modes):
    """The options every test script takes; `modes`: the choices of its first argument."""
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=modes)
    p.add_argument("--switchml", help="path of the `switchml` binary")
    p.add_argument("--pythonpath", help="folder that holds the switchml package (default: the installed one)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--init", help="init_method URL")
    return p


def dispatch(p, workers, parent):
    """Parses the command line: a worker mode runs workers[mode](args); any other mode is the
    parent's (which needs --switchml)."""
    args = p.parse_args()
    if args.mode in workers:
        rc = workers[args.mode](args)
        # Leave without the interpreter's finalization: torch 2.15's Gloo sometimes aborts there
        # ("terminate called without an active exception", seen in plain gloo runs too), after
        # the worker has destroyed its groups and printed everything.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc if isinstance(rc, int) else 1)
    if not args.switchml:
        p.error("--switchml is required")
    return parent(args)
