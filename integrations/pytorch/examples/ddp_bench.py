#!/usr/bin/python3
"""DDP step-time benchmark: real torch DistributedDataParallel training steps over the "switchml"
backend and over "gloo", on the same links in the same run, interleaved, for a few models of
different gradient sizes and compute/communication ratios (built from torch.nn only).

  ddp_bench.py --rank R --world-size N --init-method file:///shared/dir/store|tcp://ADDR:PORT \
        [--models cnn,mlp,resnet,transformer] [--warmup W] [--steps S] [--block K]
        [--iface eth0] --json out.json          # one process of the job: start N of them
  ddp_bench.py --list-models                    # the models: parameters, gradient bytes, batch

Each process initialises the default group with backend "switchml" (SWITCHML_CONTROLLER names
the switch's controller, at least on rank 0) and a second group over the same ranks with
`dist.new_group(backend="gloo")`. For each model it builds the model once from --seed and makes
two replicas of it: one wrapped in DDP over the switchml group, one in DDP over the gloo group,
each with its own SGD optimizer (momentum 0.9). Both train on the same synthetic batches (seeded
per model, rank and batch index), so they differ only by what their all-reduces return.

Schedule per model: W warm-up steps of the switchml replica, then W of the gloo replica
(untimed; DDP rebuilds its buckets after the first step), then rounds of K timed steps of the
switchml replica followed by K timed steps of the gloo replica, until S timed steps of each;
every block starts after a barrier (untimed), so the two backends see the same machine load
over the run. A step = zero_grad + forward + loss + backward (which waits for DDP's
all-reduces) + optimizer step, timed on every rank; the step's time is the slowest rank's.

At the end of each model, checked (every process exits 3 if a check fails, after the report):
  - replicas identical: every rank holds bit-identical parameters, per backend (DDP's contract);
  - reduced gradients equal: on the same weights and data, switchml's DDP-reduced gradients
    equal gloo's within --grad-tolerance, as ||g_switchml - g_gloo|| / ||g_gloo||. Compared at
    the first step (both replicas still hold the initial weights) and once more after the run,
    when the gloo replica has taken the switchml replica's weights and buffers (one extra
    forward + backward of each, untimed, no optimizer step). SwitchML block-quantizes float32
    to int32 (error ~2^-30 * N of each 256-element block's largest value), so this is ~1e-7;
    a wrong all-reduce (a missing 1/N, a lost bucket) makes it O(1);
  - every loss finite; the switchml group made SwitchML calls (the gradients really went through
    the switch), none failed and none of DDP's all-reduces fell back to the inner Gloo group;
  - with --param-tolerance T > 0: the final models agree, ||p_switchml - p_gloo|| /
    ||p_gloo - p_initial|| <= T. Reported always, checked only on request: SGD amplifies any
    rounding difference, and in resnet (BatchNorm) chaotically: measured in plain float32
    training (one process, lr 0.01, momentum 0.9), a relative perturbation of 1e-7 of every
    gradient grows to 0.07 of the training distance in 53 resnet steps (0.04 with GroupNorm,
    3e-4 without normalization), while cnn, mlp and transformer stay below 1e-6.
--inject-fault scale-grad (a testing aid) makes the switchml replica's gradients wrong on purpose
(x1.5 after the all-reduce, on every rank): the gradient check must then fail.

Reported per model and backend: median, p90 and mean step time, speedup (gloo median / switchml
median), the all-reduce volume per step (gradient bytes, DDP's bucket count), the SwitchML
client counters over the timed steps, and with --iface the bytes each rank sent and received
per timed step on that interface. Rank 0 prints progress after every round, then a table, and
writes --json.
"""

import argparse
import copy
import datetime
import functools
import math
import os
import statistics
import sys
import time

from example_util import non_negative, positive, write_json

# name -> (description, batch size per process); the builders are in make_model().
MODELS = {
    "cnn": ("FashionMNIST CNN (docs/training.md): 2 conv + 2 linear, 1x28x28 input", 32),
    "mlp": ("MLP 784-2048-1024-10 (ReLU): few FLOPs per gradient byte", 32),
    "resnet": ("ResNet-style conv net: stem + 3 stages of 1 basic block (32/64/128 ch, BatchNorm), 3x32x32", 16),
    "transformer": ("Transformer encoder: embedding 2000x256, 2 layers x 4 heads, FF 1024, sequence 32", 8),
}
DEFAULT_MODELS = "cnn,mlp,resnet,transformer"


# ---------------------------------------------------------------- models

def make_model(name):
    """Builds model `name` (torch.nn only). Returns (module, make_batch) where make_batch(g, n)
    draws a synthetic (input, target) batch of n samples from torch.Generator g."""
    import torch
    import torch.nn as nn

    classes = 10
    if name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, classes))
        shape = (1, 28, 28)
    elif name == "mlp":
        model = nn.Sequential(
            nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.ReLU(),
            nn.Linear(1024, classes))
        shape = (1, 28, 28)
    elif name == "resnet":
        model = _nn_classes()[0](classes)
        shape = (3, 32, 32)
    elif name == "transformer":
        model = _nn_classes()[1](vocab=2000, d_model=256, heads=4, ff=1024, layers=2, seq=32,
                                classes=classes)
        shape = None
    else:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")

    def make_batch(g, n):
        if shape is None:
            x = torch.randint(0, 2000, (n, 32), generator=g)
        else:
            x = torch.randn((n,) + shape, generator=g)
        y = torch.randint(0, classes, (n,), generator=g)
        return x, y
    return model, make_batch


@functools.lru_cache(maxsize=None)
def _nn_classes():
    """The nn.Module classes of the resnet and transformer models (defined on first use, so that
    --help works without torch)."""
    import torch
    import torch.nn as nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.down is None else self.down(x)))

    class ResNetish(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
            self.stages = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 128, 2))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))

        def forward(self, x):
            return self.head(self.stages(self.stem(x)))

    class TinyTransformer(nn.Module):
        def __init__(self, vocab, d_model, heads, ff, layers, seq, classes):
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            self.pos = nn.Parameter(torch.zeros(1, seq, d_model))
            nn.init.normal_(self.pos, std=0.02)
            # dropout 0: the two replicas must see the same computation (no random masks).
            layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, classes)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens) + self.pos).mean(1))

    return ResNetish, TinyTransformer




def model_info(name):
    import torch
    torch.manual_seed(0)
    model, _ = make_model(name)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"model": name, "description": MODELS[name][0], "batch_per_process": MODELS[name][1],
            "parameters": params, "gradient_bytes": 4 * params,
            "tensors": sum(1 for p in model.parameters() if p.requires_grad)}


def list_models():
    print(f"{'model':<12} {'parameters':>11} {'gradient MB':>12} {'tensors':>8} {'batch':>6}  description")
    for name in MODELS:
        i = model_info(name)
        print(f"{name:<12} {i['parameters']:>11,} {i['gradient_bytes'] / 1e6:>12.2f} {i['tensors']:>8} "
              f"{i['batch_per_process']:>6}  {i['description']}")
    return 0


# ---------------------------------------------------------------- helpers

def percentile(values, q):
    """Linear-interpolated percentile q in [0, 100] of a non-empty list."""
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    pos = (len(v) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summary_ms(times_s):
    return {"median_ms": 1000 * statistics.median(times_s), "p90_ms": 1000 * percentile(times_s, 90),
            "mean_ms": 1000 * statistics.fmean(times_s), "min_ms": 1000 * min(times_s),
            "max_ms": 1000 * max(times_s)}


def read_iface(iface):
    """(tx_bytes, rx_bytes) of a network interface of this namespace, or (0, 0) without one."""
    if not iface:
        return 0, 0
    base = f"/sys/class/net/{iface}/statistics/"
    with open(base + "tx_bytes") as f:
        tx = int(f.read())
    with open(base + "rx_bytes") as f:
        rx = int(f.read())
    return tx, rx


def ddp_bucket_count(ddp):
    """Number of DDP buckets (after the rebuild at the second step), or None if torch hides it."""
    try:
        data = ddp._get_ddp_logging_data()
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
        if isinstance(sizes, str):
            return len([s for s in sizes.split(",") if s.strip()])
        return len(sizes) if sizes else None
    except Exception:  # informative only
        return None


# ---------------------------------------------------------------- one model

def bench_model(name, args, gloo_pg, log):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import switchml.torch as smt

    rank, world = dist.get_rank(), dist.get_world_size()
    batch = MODELS[name][1]
    torch.manual_seed(args.seed)  # the same initial weights on every rank, for both replicas
    base, make_batch = make_model(name)
    initial = [p.detach().clone() for p in base.parameters()]
    replicas = {"switchml": copy.deepcopy(base), "gloo": copy.deepcopy(base)}
    ddps = {"switchml": DDP(replicas["switchml"]),  # the default group: backend switchml
            "gloo": DDP(replicas["gloo"], process_group=gloo_pg)}
    opts = {b: torch.optim.SGD(replicas[b].parameters(), lr=args.lr, momentum=0.9) for b in replicas}
    params = sum(p.numel() for p in base.parameters() if p.requires_grad)

    # Synthetic data: a pool of batches per rank (seeded by model, rank, index), cycled; step i
    # of either replica uses batch i % pool, so both replicas see the same data in the same order.
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + sum(map(ord, name)))
    pool = [make_batch(g, batch) for _ in range(args.data_batches)]

    step_of = {"switchml": 0, "gloo": 0}
    times = {"switchml": [], "gloo": []}      # timed steps, this rank
    losses = {"switchml": [], "gloo": []}     # every step (warm-up included), this rank
    wire = {"switchml": [0, 0], "gloo": [0, 0]}  # tx, rx bytes during timed blocks, this rank

    fault = args.inject_fault == "scale-grad"
    first_grads = {}  # backend -> the reduced gradients of its first step (identical weights and data)

    def reduced_grads(ddp):
        return torch.cat([q.grad.detach().reshape(-1) for q in ddp.parameters() if q.requires_grad]).clone()

    def run_steps(backend, count, timed):
        ddp, opt = ddps[backend], opts[backend]
        tx0, rx0 = read_iface(args.iface)
        for _ in range(count):
            x, y = pool[step_of[backend] % len(pool)]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()  # DDP all-reduces the gradients (SUM of grad / world) here
            if fault and backend == "switchml":
                for q in ddp.parameters():  # testing aid: a wrong all-reduce result, same on all ranks
                    q.grad.mul_(1.5)
            if step_of[backend] == 0:  # untimed (warm-up)
                first_grads[backend] = reduced_grads(ddp)
            opt.step()
            t1 = time.perf_counter()
            step_of[backend] += 1
            losses[backend].append(loss.item())
            if timed:
                times[backend].append(t1 - t0)
        if timed:
            tx1, rx1 = read_iface(args.iface)
            wire[backend][0] += tx1 - tx0
            wire[backend][1] += rx1 - rx0

    def barrier():
        dist.barrier(group=gloo_pg)

    t_model = time.perf_counter()
    for backend in ("switchml", "gloo"):
        barrier()
        run_steps(backend, args.warmup, timed=False)
    stats0 = dict(smt.stats())
    rounds = math.ceil(args.steps / args.block)
    every = args.progress_every or max(1, rounds // 10)  # default: about 10 lines per model
    for r in range(rounds):
        k = min(args.block, args.steps - r * args.block)
        for backend in ("switchml", "gloo"):
            barrier()
            run_steps(backend, k, timed=True)
        if rank == 0 and (r + 1 == rounds or (r + 1) % every == 0):
            elapsed = time.perf_counter() - t_model
            done = (r + 1) / rounds
            s = statistics.median(times["switchml"][-k:])
            gl = statistics.median(times["gloo"][-k:])
            log(f"{name}: round {r + 1}/{rounds} ({len(times['switchml'])}/{args.steps} timed steps each): "
                f"last block median switchml {1000 * s:.1f} ms, gloo {1000 * gl:.1f} ms (rank 0); "
                f"elapsed {elapsed:.0f} s, eta {elapsed / done * (1 - done):.0f} s")
    stats1 = dict(smt.stats())
    wall_s = time.perf_counter() - t_model
    barrier()

    # Checks. Replicas: bit-identical parameters on every rank, per backend.
    # Final models: switchml's against gloo's, relative to how far training moved them.
    flat = {b: torch.cat([p.detach().reshape(-1) for p in replicas[b].parameters()]) for b in replicas}
    identical = {}
    for b in replicas:
        gathered = [torch.empty_like(flat[b]) for _ in range(world)]
        dist.all_gather(gathered, flat[b], group=gloo_pg)
        identical[b] = all(torch.equal(gathered[0], t) for t in gathered[1:])
    init_flat = torch.cat([p.reshape(-1) for p in initial])
    diff = (flat["switchml"] - flat["gloo"]).double()
    moved = (flat["gloo"] - init_flat).double()
    rel_to_training = (diff.norm() / moved.norm()).item() if moved.norm() > 0 else float("inf")
    max_abs_diff = diff.abs().max().item()
    finite = all(math.isfinite(v) for b in losses for v in losses[b])

    # Reduced gradients on identical weights and data: the first step of both replicas, and one
    # more backward pass (no optimizer step) after the gloo replica took the switchml replica's
    # final weights and buffers.
    def grad_error(gs, gg):
        d = (gs - gg).double()
        return (d.norm() / gg.double().norm()).item(), (d.abs().max() / gg.double().abs().max()).item()

    grad_first = grad_error(first_grads["switchml"], first_grads["gloo"])
    replicas["gloo"].load_state_dict(replicas["switchml"].state_dict())
    end_grads = {}
    for b in ("switchml", "gloo"):
        barrier()
        x, y = pool[0]
        ddps[b].zero_grad(set_to_none=True)
        F.cross_entropy(ddps[b](x), y).backward()
        if fault and b == "switchml":
            for q in ddps[b].parameters():
                q.grad.mul_(1.5)
        end_grads[b] = reduced_grads(ddps[b])
    grad_end = grad_error(end_grads["switchml"], end_grads["gloo"])
    grad_rel = max(grad_first[0], grad_end[0])

    # Every rank's step times, losses and wire bytes to every rank (gloo group).
    n_timed = len(times["switchml"])
    n_all = len(losses["switchml"])
    local = torch.tensor([times["switchml"], times["gloo"]], dtype=torch.float64)
    local_loss = torch.tensor([losses["switchml"], losses["gloo"]], dtype=torch.float64)
    local_wire = torch.tensor([wire["switchml"], wire["gloo"]], dtype=torch.float64)
    all_t = [torch.empty_like(local) for _ in range(world)]
    all_l = [torch.empty_like(local_loss) for _ in range(world)]
    all_w = [torch.empty_like(local_wire) for _ in range(world)]
    dist.all_gather(all_t, local, group=gloo_pg)
    dist.all_gather(all_l, local_loss, group=gloo_pg)
    dist.all_gather(all_w, local_wire, group=gloo_pg)
    t = torch.stack(all_t)        # [world, backend, step]
    lo = torch.stack(all_l)       # [world, backend, step]
    w = torch.stack(all_w)        # [world, backend, (tx, rx)]

    delta = {k: stats1[k] - stats0[k] for k in stats1 if isinstance(stats1[k], int) and k in stats0}
    calls_ok = delta.get("calls_submitted", 0) > 0 and delta.get("fallback_allreduces", 0) == 0 \
        and delta.get("calls_failed", 0) == 0
    grad_ok = grad_rel <= args.grad_tolerance
    param_ok = args.param_tolerance == 0 or rel_to_training <= args.param_tolerance
    ok = identical["switchml"] and identical["gloo"] and finite and grad_ok and param_ok and calls_ok

    result = {"model": name, "description": MODELS[name][0], "batch_per_process": batch,
              "parameters": params, "allreduce_bytes_per_step": 4 * params,
              "ddp_buckets": {b: ddp_bucket_count(ddps[b]) for b in ddps},
              "warmup_steps": args.warmup, "timed_steps": n_timed, "block": args.block,
              "wall_s": wall_s, "backends": {}}
    for i, b in enumerate(("switchml", "gloo")):
        step_max = t[:, i, :].max(0).values.tolist()  # a step ends when the slowest rank's does
        entry = {"step_time_s": step_max, "step_time_per_rank_s": t[:, i, :].tolist(),
                 "loss_mean_over_ranks": lo[:, i, :].mean(0).tolist(),
                 "replicas_identical": identical[b]}
        entry.update(summary_ms(step_max))
        if args.iface and n_timed:
            entry["wire_tx_bytes_per_step_per_rank"] = w[:, i, 0].mean().item() / n_timed
            entry["wire_rx_bytes_per_step_per_rank"] = w[:, i, 1].mean().item() / n_timed
        result["backends"][b] = entry
    result["backends"]["switchml"]["switchml_stats_timed"] = delta
    result["speedup"] = result["backends"]["gloo"]["median_ms"] / result["backends"]["switchml"]["median_ms"]
    result["speedup_mean"] = result["backends"]["gloo"]["mean_ms"] / result["backends"]["switchml"]["mean_ms"]
    loss_diff = (lo[:, 0, :] - lo[:, 1, :]).abs()
    result["checks"] = {
        "replicas_identical": identical["switchml"] and identical["gloo"],
        "gradient_relative_error": grad_rel,
        "gradient_relative_error_first_step": grad_first[0],
        "gradient_relative_error_end": grad_end[0],
        "gradient_max_abs_error_over_max_abs_first_step": grad_first[1],
        "gradient_max_abs_error_over_max_abs_end": grad_end[1],
        "grad_tolerance": args.grad_tolerance,
        "gradients_ok": grad_ok,
        "switchml_vs_gloo_diff_over_training_distance": rel_to_training,
        "param_tolerance": args.param_tolerance or None,
        "parameters_ok": param_ok,
        "max_abs_parameter_difference": max_abs_diff,
        "max_abs_loss_difference": loss_diff.max().item() if n_all else 0.0,
        "first_step_loss_difference": loss_diff[:, 0].max().item() if n_all else 0.0,
        "losses_finite": finite,
        "switchml_calls_made_no_fallback": calls_ok,
        "ok": ok,
    }
    return result


# ---------------------------------------------------------------- report

def print_table(results, out=sys.stdout):
    hdr = (f"{'model':<12} {'params':>10} {'MB/step':>8} {'buckets':>7} | {'switchml med':>12} {'p90':>8} | "
           f"{'gloo med':>9} {'p90':>8} | {'speedup':>7} | {'grad err':>8} {'param diff':>10} {'replicas':>8} {'check':>5}")
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in results:
        s, g, c = r["backends"]["switchml"], r["backends"]["gloo"], r["checks"]
        nb = r["ddp_buckets"].get("switchml")
        print(f"{r['model']:<12} {r['parameters']:>10,} {r['allreduce_bytes_per_step'] / 1e6:>8.2f} "
              f"{(str(nb) if nb is not None else '-'):>7} | {s['median_ms']:>9.1f} ms {s['p90_ms']:>5.1f} ms | "
              f"{g['median_ms']:>6.1f} ms {g['p90_ms']:>5.1f} ms | {r['speedup']:>6.2f}x | "
              f"{c['gradient_relative_error']:>8.1e} {c['switchml_vs_gloo_diff_over_training_distance']:>10.1e} "
              f"{('same' if c['replicas_identical'] else 'DIFFER'):>8} {('ok' if c['ok'] else 'FAIL'):>5}",
              file=out)
    if any("wire_tx_bytes_per_step_per_rank" in r["backends"]["switchml"] for r in results):
        print(file=out)
        print(f"{'model':<12} {'gradient MB':>11} | {'switchml tx/rx MB per step per rank':>36} | "
              f"{'gloo tx/rx MB per step per rank':>32}", file=out)
        for r in results:
            s, g = r["backends"]["switchml"], r["backends"]["gloo"]
            print(f"{r['model']:<12} {r['allreduce_bytes_per_step'] / 1e6:>11.2f} | "
                  f"{s['wire_tx_bytes_per_step_per_rank'] / 1e6:>17.2f} / {s['wire_rx_bytes_per_step_per_rank'] / 1e6:<16.2f} | "
                  f"{g['wire_tx_bytes_per_step_per_rank'] / 1e6:>15.2f} / {g['wire_rx_bytes_per_step_per_rank'] / 1e6:<14.2f}",
                  file=out)


# ---------------------------------------------------------------- main

def run(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # several processes share few cores
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import switchml.torch  # noqa: F401  (registers the backend)

    rank, world = args.rank, args.world_size
    tag = f"[ddp_bench rank {rank}]"
    t_start = time.perf_counter()

    def log(msg):
        print(f"{tag} {time.perf_counter() - t_start:7.1f} s  {msg}", flush=True)

    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("switchml", init_method=args.init_method, rank=rank, world_size=world,
                            timeout=timeout)
    gloo_pg = dist.new_group(backend="gloo", timeout=timeout)
    if rank == 0:
        log(f"{world} processes; models {','.join(args.models)}; {args.warmup} warm-up + {args.steps} timed "
            f"steps per backend, interleaved in blocks of {args.block}; lr {args.lr}, seed {args.seed}"
            f"{'; interface ' + args.iface if args.iface else ''}")
    results = []
    for i, name in enumerate(args.models):
        if rank == 0:
            info = model_info(name)
            log(f"model {i + 1}/{len(args.models)} {name}: {info['parameters']:,} parameters "
                f"({info['gradient_bytes'] / 1e6:.2f} MB of gradients per step), batch "
                f"{info['batch_per_process']} per process")
        res = bench_model(name, args, gloo_pg, log)
        results.append(res)
        if rank == 0:
            s, g, c = res["backends"]["switchml"], res["backends"]["gloo"], res["checks"]
            log(f"{name}: median step switchml {s['median_ms']:.1f} ms, gloo {g['median_ms']:.1f} ms, "
                f"speedup {res['speedup']:.2f}x; gradient error {c['gradient_relative_error']:.1e} (tolerance "
                f"{args.grad_tolerance:g}), parameter difference {c['switchml_vs_gloo_diff_over_training_distance']:.1e}"
                f"{f' (tolerance {args.param_tolerance:g})' if args.param_tolerance else ''}, replicas identical "
                f"{c['replicas_identical']}: "
                f"{'ok' if c['ok'] else 'FAIL'}")
    all_ok = all(r["checks"]["ok"] for r in results)
    if rank == 0:
        doc = {"world_size": world, "models": args.models, "warmup_steps": args.warmup,
               "timed_steps": args.steps, "block": args.block, "lr": args.lr, "seed": args.seed,
               "grad_tolerance": args.grad_tolerance, "param_tolerance": args.param_tolerance or None,
               "label": args.label, "iface": args.iface,
               "inject_fault": args.inject_fault,
               "torch": torch.__version__, "cpus": os.cpu_count(),
               "loadavg_end": open("/proc/loadavg").read().split()[:3],
               "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "ok": all_ok, "results": results}
        if args.json:
            write_json(args.json, doc)
        print(flush=True)
        print(f"DDP step time, {world} processes{', ' + args.label if args.label else ''}: median / p90 of "
              f"{args.steps} timed steps per backend (each the slowest rank's), speedup = gloo median / "
              f"switchml median.\ngrad err = ||g_switchml - g_gloo|| / ||g_gloo||, reduced gradients on the same "
              f"weights and data (first step, and after the run; tolerance {args.grad_tolerance:g}); param diff = "
              f"||p_switchml - p_gloo|| / ||p_gloo - p_0|| after the run"
              f"{f' (tolerance {args.param_tolerance:g})' if args.param_tolerance else ' (reported, not checked)'}")
        print_table(results)
        if args.json:
            print(f"wrote {args.json}")
        print(f"ddp_bench: {'PASS' if all_ok else 'FAIL'}", flush=True)
    dist.barrier(group=gloo_pg)
    dist.destroy_process_group()
    # Leave without the interpreter's finalization, where torch 2.15's Gloo sometimes aborts
    # ("terminate called without an active exception"), as in fashion_mnist_ddp.py.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if all_ok else 3)


def model_list(v):
    names = [m.strip() for m in v.split(",") if m.strip()]
    if not names:
        raise argparse.ArgumentTypeError("needs at least one model")
    for m in names:
        if m not in MODELS:
            raise argparse.ArgumentTypeError(f"unknown model {m!r} (known: {', '.join(MODELS)})")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a model is listed twice in {v!r}")
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list-models", action="store_true", help="print the models and exit (no job)")
    p.add_argument("--rank", type=non_negative)
    p.add_argument("--world-size", type=positive)
    p.add_argument("--init-method", help="file:///path or tcp://addr:port (same on every rank)")
    p.add_argument("--models", type=model_list, default=model_list(DEFAULT_MODELS),
                   help=f"comma separated, in this order (default {DEFAULT_MODELS})")
    p.add_argument("--warmup", type=positive, default=3, help="untimed steps per backend and model (default 3)")
    p.add_argument("--steps", type=positive, default=50, help="timed steps per backend and model (default 50)")
    p.add_argument("--block", type=positive, default=5,
                   help="consecutive steps of one backend before switching to the other (default 5)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate, momentum 0.9 (default 0.01)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-batches", type=positive, default=8, help="synthetic batches per rank, cycled (default 8)")
    p.add_argument("--grad-tolerance", type=float, default=1e-4,
                   help="max ||g_switchml - g_gloo|| / ||g_gloo|| of the reduced gradients on the same weights "
                   "and data (default 1e-4)")
    p.add_argument("--param-tolerance", type=float, default=0.0,
                   help="max ||p_switchml - p_gloo|| / ||p_gloo - p_initial|| after the run (default 0: reported, "
                   "not checked; training amplifies rounding differences chaotically in some models)")
    p.add_argument("--iface", default="", help="interface whose tx/rx bytes to count per step (e.g. eth0 "
                   "on the emulated cluster; not lo, which every rank shares)")
    p.add_argument("--progress-every", type=non_negative, default=0,
                   help="progress line every K rounds (default 0: about 10 lines per model)")
    p.add_argument("--timeout", type=positive, default=300, help="torch.distributed timeout, s (default 300)")
    p.add_argument("--inject-fault", choices=["none", "scale-grad"], default="none",
                   help="testing aid: scale-grad multiplies the switchml replica's reduced gradients by 1.5 "
                   "on every rank (as a wrong all-reduce would), which the switchml == gloo check must catch")
    p.add_argument("--label", default="", help="stored in the JSON and shown in the table (e.g. loopback)")
    p.add_argument("--json", help="result JSON (written by rank 0)")
    args = p.parse_args(argv)
    if args.list_models:
        return list_models()
    for opt in ("rank", "world_size", "init_method"):
        if getattr(args, opt) is None:
            p.error(f"--{opt.replace('_', '-')} is required (or --list-models)")
    if args.rank >= args.world_size:
        p.error(f"--rank {args.rank} must be < --world-size {args.world_size}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        p.error(f"--lr must be a positive number, got {args.lr}")
    if not (args.grad_tolerance > 0 and math.isfinite(args.grad_tolerance)):
        p.error(f"--grad-tolerance must be a positive number, got {args.grad_tolerance}")
    if not (args.param_tolerance >= 0 and math.isfinite(args.param_tolerance)):
        p.error(f"--param-tolerance must be >= 0, got {args.param_tolerance}")
    if args.iface and not os.path.isdir(f"/sys/class/net/{args.iface}"):
        p.error(f"--iface {args.iface}: no such network interface in this namespace")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
