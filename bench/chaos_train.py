"""One rank of the chaos scenario's training run (bench/run_chaos.sh): torch
DistributedDataParallel training of a small MLP on synthetic data from a fixed seed, over the
"switchml" backend (the disturbed run) or plain "gloo" (the reference run).

Everything that decides the model is a function of --seed alone: the initial weights, the data
set (a random "teacher" network labels random inputs), and which samples each rank takes at each
step. With one thread per rank the forward and backward passes are deterministic, so two runs
differ only in what the all-reduces return.

Gradient modes (--grad-mode):
  int32    (default) a DDP communication hook turns each gradient bucket into fixed point,
           q = clamp(round(g * 2^F), +-floor((2^31 - 1) / world)), all-reduces q as int32 SUM
           and divides the sum by 2^F * world. An int32 sum is exact on every path (the switch,
           the inner Gloo group after a fallback, a plain Gloo group), so every step's averaged
           gradient is bit-identical to the reference run's, and so is the final model:
           the comparison is equality.
  float32  DDP's default all-reduce of float32 gradients. The switch quantizes each packet to
           int32 with a per-packet exponent (docs/design.md), so each step's sum differs from
           Gloo's within the quantizer's bound (about world x 2^-23 of the packet's largest
           value per element); the difference feeds back into the training, so the models drift
           apart, slowly for this small model: the comparison is a tolerance, the final
           parameters' max |difference| and their distance relative to the training distance.

Rank 0 appends one line per finished step to --progress ("STEP SECONDS_SINCE_START"), which the
fault driver of run_chaos.sh reads. Every rank writes --out-dir/rank<R>.json at the end (steps
done, per-step times, the backend's stats() after every step, the error if a step failed) and
its final parameters to --out-dir/params-rank<R>.pt. A failed step ends the run at once: its
error is recorded and the process exits 3 (no destroy_process_group: the group may be broken).
"""

import argparse
import datetime
import json
import os
import sys
import time
import traceback


def positive(v):
    n = int(v)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return n


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=positive, required=True)
    p.add_argument("--init-method", required=True, help="torch.distributed init method (file://...)")
    p.add_argument("--backend", choices=["switchml", "gloo"], required=True)
    p.add_argument("--steps", type=positive, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--grad-mode", choices=["int32", "float32"], default="int32")
    p.add_argument("--fixed-point-bits", type=int, default=20,
                   help="F of the int32 mode: gradients in units of 2^-F (default 20)")
    p.add_argument("--hidden", type=positive, default=256, help="hidden width of the MLP (default 256)")
    p.add_argument("--batch", type=positive, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--timeout", type=positive, default=300,
                   help="torch.distributed timeout in seconds (Gloo's collectives; default 300)")
    p.add_argument("--barrier-every", type=positive, default=5,
                   help="dist.barrier() after every N steps (default 5): where the switchml backend's ranks "
                        "move back to the switch after a failover; the Gloo reference makes the same calls")
    p.add_argument("--progress", default="", help="file rank 0 appends 'STEP SECONDS' to per step")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    if not 0 <= a.rank < a.world_size:
        p.error(f"--rank must be in [0, {a.world_size}), got {a.rank}")
    if not 1 <= a.fixed_point_bits <= 28:
        p.error(f"--fixed-point-bits must be in [1, 28], got {a.fixed_point_bits}")
    return a


IN_FEATURES, CLASSES, DATASET = 64, 10, 8192


def make_data(torch, seed):
    """The synthetic data set: random inputs labelled by a random teacher network."""
    g = torch.Generator().manual_seed(seed * 7919 + 13)
    x = torch.randn(DATASET, IN_FEATURES, generator=g)
    teacher = torch.randn(IN_FEATURES, CLASSES, generator=g)
    y = (torch.tanh(x @ teacher) + 0.3 * torch.randn(DATASET, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def batch_indices(torch, seed, step, rank, world, batch):
    """Rank `rank`'s samples of step `step`: a seeded permutation per step, split by rank."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    perm = torch.randperm(DATASET, generator=g)
    return perm[rank * batch:(rank + 1) * batch]


CALLS = [0]  # all-reduces this rank made (through the hooks)


def int32_hook(torch, dist, bits, world):
    """The fixed-point DDP communication hook of --grad-mode int32 (see the module docstring)."""
    scale = float(2 ** bits)
    limit = float((2 ** 31 - 1) // world)  # no sum of `world` values can overflow int32

    def hook(state, bucket):
        g = bucket.buffer()
        q = torch.clamp(torch.round(g * scale), -limit, limit).to(torch.int32)
        CALLS[0] += 1
        fut = dist.all_reduce(q, async_op=True).get_future()

        def done(f):
            s = f.value()[0]
            return s.to(torch.float32).div_(scale * world)
        return fut.then(done)
    return hook


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    torch_threads = 1
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(torch_threads)
    if a.backend == "switchml":
        import switchml.torch as smt  # noqa: F401  (registers the backend)
    else:
        smt = None

    result = {"rank": a.rank, "world_size": a.world_size, "backend": a.backend, "label": a.label,
              "grad_mode": a.grad_mode, "fixed_point_bits": a.fixed_point_bits, "seed": a.seed,
              "steps_requested": a.steps, "steps_done": 0, "step_time_s": [], "loss": [],
              "stats_per_step": [], "stats_end": None, "error": None, "error_step": None,
              "failed_step_time_s": None, "allreduce_calls": 0,
              "error_traceback": None}
    out_json = os.path.join(a.out_dir, f"rank{a.rank}.json")

    def write_result():
        with open(out_json + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(out_json + ".tmp", out_json)

    def backend_stats():
        if smt is None:
            return None
        try:
            return {k: int(v) for k, v in smt.stats().items()}
        except Exception as e:  # the stats must never end the run; say why they are missing
            return {"_error": str(e)}

    progress = open(a.progress, "a", buffering=1) if (a.progress and a.rank == 0) else None
    t_start = time.monotonic()
    step = -1
    t0 = None
    try:
        dist.init_process_group(a.backend, init_method=a.init_method, rank=a.rank,
                                world_size=a.world_size, timeout=datetime.timedelta(seconds=a.timeout))
        torch.manual_seed(a.seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(IN_FEATURES, a.hidden), torch.nn.ReLU(),
            torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
            torch.nn.Linear(a.hidden, CLASSES))
        result["parameters"] = sum(p.numel() for p in model.parameters())
        if a.rank == 0:
            torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
                       os.path.join(a.out_dir, "params-init.pt"))
        ddp = DDP(model)
        if a.grad_mode == "int32":
            ddp.register_comm_hook(None, int32_hook(torch, dist, a.fixed_point_bits, a.world_size))
        else:  # DDP's own all-reduce, counted
            def counted(state, bucket):
                CALLS[0] += 1
                return torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook(state, bucket)
            import torch.distributed.algorithms.ddp_comm_hooks.default_hooks  # noqa: F401
            ddp.register_comm_hook(None, counted)
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
        x, y = make_data(torch, a.seed)
        loss_fn = torch.nn.CrossEntropyLoss()
        if progress:
            progress.write(f"0 {time.monotonic() - t_start:.6f}\n")  # step 0: the group is up
        for step in range(a.steps):
            t0 = time.monotonic()
            idx = batch_indices(torch, a.seed, step, a.rank, a.world_size, a.batch)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()  # DDP's all-reduces run (and are waited for) in here
            opt.step()
            if (step + 1) % a.barrier_every == 0:
                dist.barrier()  # the backend comes back to the switch here, when it can
            dt = time.monotonic() - t0
            result["steps_done"] = step + 1
            result["step_time_s"].append(dt)
            result["loss"].append(loss.item())
            result["stats_per_step"].append(backend_stats())
            result["allreduce_calls"] = CALLS[0]
            if progress:
                progress.write(f"{step + 1} {time.monotonic() - t_start:.6f}\n")
            if a.rank == 0 and (step + 1) % 10 == 0:
                print(f"[{a.label or a.backend}] step {step + 1}/{a.steps}: loss {loss.item():.4f}, "
                      f"{dt * 1e3:.1f} ms", flush=True)
        result["stats_end"] = backend_stats()
        torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
                   os.path.join(a.out_dir, f"params-rank{a.rank}.pt"))
        write_result()
        dist.destroy_process_group()
        print(f"[{a.label or a.backend}] rank {a.rank}: {result['steps_done']} steps done", flush=True)
        # torch 2.15's Gloo may abort at interpreter exit: leave without running it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except BaseException as e:  # noqa: BLE001  (recorded, then the process ends)
        result["error"] = f"{type(e).__name__}: {e}"
        result["error_step"] = step + 1 if step >= 0 else 0  # 1-based; 0: before the first step
        result["failed_step_time_s"] = time.monotonic() - t0 if t0 is not None else None
        result["error_traceback"] = traceback.format_exc()
        result["stats_end"] = backend_stats()
        write_result()
        print(f"[{a.label or a.backend}] rank {a.rank}: FAILED at step "
              f"{result['error_step']}: {result['error']}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
