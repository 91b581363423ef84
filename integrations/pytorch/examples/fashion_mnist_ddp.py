#!/usr/bin/python3
"""DistributedDataParallel training of a small CNN on FashionMNIST, over any torch.distributed
backend (made to compare "switchml" with "gloo" from the same seed).

  fashion_mnist_ddp.py train --backend switchml|gloo --rank R --world-size N \
        --init-method file:///shared/dir/store|tcp://ADDR:PORT [--epochs E] [--batch-size B]
        [--seed S] [--max-steps M] [--train-subset K] [--test-subset K] --out run.json
  fashion_mnist_ddp.py compare A.json B.json [--every K] [--out both.json]

train: one process of the job (start N of them). Rank 0 prints a progress line every
--log-every steps and, at the end, writes --out: the settings, the training loss of every step
(mean over the ranks of each rank's mini-batch loss), every step's wall time as seen by each
rank, the final test accuracy and loss (whole test set, or --test-subset), and whether every
rank ended with bit-identical parameters. With backend "switchml", `import switchml.torch`
registers the backend and SWITCHML_CONTROLLER (rank 0 at least) names the switch's controller.

Reproducibility contract: with the same --seed, --world-size, --batch-size and subsets, the
initial weights, the per-rank data shards and the batch order are identical whatever the
backend, so two runs differ only by what the all-reduce returns.

compare: prints two runs side by side (loss every K steps, final test accuracy, mean step
time, accuracy difference in percentage points) and writes the combined JSON.

Data: the IDX files of Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), read
with gzip + numpy; --data-dir points elsewhere. No download, no torchvision.
"""

import argparse
import datetime
import gzip
import json
import math
import os
import statistics
import sys
import time

from example_util import non_negative, positive, write_json

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
# Mean and standard deviation of the FashionMNIST training pixels (in [0, 1]).
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530
WARMUP_STEPS = 5  # excluded from the mean step time (first all-reduces, allocator warm-up)


# ---------------------------------------------------------------- data

def read_idx(path):
    """Reads a gzip'd IDX file (the MNIST format: magic, dims, big-endian) into a numpy array."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic {raw[:4].hex()})")
    if raw[2] != 0x08:
        raise ValueError(f"{path}: element type 0x{raw[2]:02x}, expected 0x08 (unsigned byte)")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    count = 1
    for d in dims:
        count *= d
    if len(raw) - offset != count:
        raise ValueError(f"{path}: {len(raw) - offset} data bytes, dims {dims} need {count}")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


def load_split(data_dir, split):
    """Returns (images uint8 [n, 1, 28, 28], labels int64 [n]) as torch tensors."""
    import torch
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise ValueError(f"{data_dir}: {split} images {images.shape} and labels {labels.shape} disagree")
    return (torch.from_numpy(images.copy()).unsqueeze(1),
            torch.from_numpy(labels.astype("int64")))


def to_float(images_u8):
    return (images_u8.float() / 255.0 - PIXEL_MEAN) / PIXEL_STD


# ---------------------------------------------------------------- model

def make_model():
    """A small CNN: 2 conv layers + 2 fully connected, 80,202 parameters."""
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2),    # 16 x 12 x 12
        nn.Conv2d(16, 32, 5), nn.ReLU(), nn.MaxPool2d(2),   # 32 x 4 x 4
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10))


def evaluate(model, images, labels, batch=1000):
    """Returns (accuracy in [0, 1], mean cross-entropy) over the given test set."""
    import torch
    import torch.nn.functional as F
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, images.shape[0], batch):
            out = model(to_float(images[i:i + batch]))
            y = labels[i:i + batch]
            loss_sum += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    model.train()
    n = images.shape[0]
    return correct / n, loss_sum / n


# ---------------------------------------------------------------- train

def train(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # several processes share few cores
    if args.backend == "switchml":
        import switchml.torch  # noqa: F401  (registers the backend)
    rank, world = args.rank, args.world_size
    tag = f"[{args.backend} rank {rank}]"

    train_x, train_y = load_split(args.data_dir, "train")
    test_x, test_y = load_split(args.data_dir, "test")
    if args.train_subset:
        train_x, train_y = train_x[:args.train_subset], train_y[:args.train_subset]
    if args.test_subset:
        test_x, test_y = test_x[:args.test_subset], test_y[:args.test_subset]
    per_rank = train_x.shape[0] // world
    steps_per_epoch = per_rank // args.batch_size
    if steps_per_epoch == 0:
        sys.exit(f"{tag} --batch-size {args.batch_size} exceeds the {per_rank} training images per rank")
    total_steps = steps_per_epoch * args.epochs
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)

    t_init = time.perf_counter()
    dist.init_process_group(args.backend, init_method=args.init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    init_s = time.perf_counter() - t_init
    torch.manual_seed(args.seed)  # same initial weights on every rank and for every backend
    model = DDP(make_model())
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # Cosine decay to 0 over the run: the last steps take small steps, so the final model (and
    # its test accuracy) depends less on the last few mini-batches.
    if args.schedule == "cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    else:
        sched = None
    if rank == 0:
        print(f"{tag} {world} processes, {n_params} parameters, {train_x.shape[0]} training / "
              f"{test_x.shape[0]} test images, batch {args.batch_size} per process, "
              f"{steps_per_epoch} steps per epoch, {total_steps} steps; init_process_group {init_s:.2f} s",
              flush=True)

    losses, step_times = [], []
    phases = []  # per step: (forward + loss, backward incl. the all-reduce wait, optimizer) in s
    step = 0
    t_train = time.perf_counter()
    cpu_train = time.process_time()  # this process, all its threads (incl. the backend's)
    for epoch in range(args.epochs):
        # Same permutation on every rank (seeded by seed and epoch), each rank takes its slice.
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        perm = torch.randperm(train_x.shape[0], generator=g)[:per_rank * world]
        mine = perm[rank * per_rank:(rank + 1) * per_rank]
        for b in range(steps_per_epoch):
            if step >= total_steps:
                break
            idx = mine[b * args.batch_size:(b + 1) * args.batch_size]
            x, y = to_float(train_x[idx]), train_y[idx]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            t1 = time.perf_counter()
            loss.backward()  # DDP all-reduces the gradients (SUM of grad / world) here
            t2 = time.perf_counter()
            opt.step()
            if sched is not None:
                sched.step()
            t3 = time.perf_counter()
            step_times.append(t3 - t0)
            phases.append((t1 - t0, t2 - t1, t3 - t2))
            losses.append(loss.item())
            step += 1
            if rank == 0 and (step % args.log_every == 0 or step == total_steps):
                recent = losses[-args.log_every:]  # rank 0's own mini-batch losses
                rt = step_times[-args.log_every:]
                elapsed = time.perf_counter() - t_train
                eta = elapsed / step * (total_steps - step)
                print(f"{tag} epoch {epoch + 1}/{args.epochs} step {step}/{total_steps} "
                      f"loss {sum(recent) / len(recent):.4f} step {1000 * sum(rt) / len(rt):.1f} ms "
                      f"elapsed {elapsed:.0f} s eta {eta:.0f} s", flush=True)
            if not torch.isfinite(loss):
                sys.exit(f"{tag} loss is {loss.item()} at step {step}")
    train_s = time.perf_counter() - t_train
    train_cpu_s = time.process_time() - cpu_train

    # Every rank must hold the same parameters (DDP's contract; a wrong all-reduce breaks it).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)  # "switchml" delegates all_gather to its inner Gloo group
    identical = all(torch.equal(gathered[0], t) for t in gathered[1:])

    # Communication alone: all-reduces of one gradient's worth of float32 (what DDP reduces per
    # step when its buckets hold every parameter), timed after a barrier, one at a time.
    probe = torch.randn(n_params, generator=torch.Generator().manual_seed(rank))
    dist.barrier()
    allreduce_s = []
    for _ in range(args.allreduce_probes):
        t0 = time.perf_counter()
        dist.all_reduce(probe)
        allreduce_s.append(time.perf_counter() - t0)
        probe.div_(world)

    # Per-step loss and step time of every rank, gathered to build the global curves.
    local = torch.tensor([losses, step_times, [train_cpu_s] * len(losses)], dtype=torch.float64)
    all_local = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(all_local, local)

    result = None
    if rank == 0:
        acc, test_loss = evaluate(model.module, test_x, test_y)
        stacked = torch.stack(all_local)  # [world, (loss, step time, cpu s), steps]
        mean_loss = stacked[:, 0, :].mean(0).tolist()
        step_max = stacked[:, 1, :].max(0).values.tolist()  # a step ends when the slowest rank's does
        timed = step_max[WARMUP_STEPS:] if len(step_max) > WARMUP_STEPS else step_max
        result = {
            "backend": args.backend, "world_size": world, "epochs": args.epochs,
            "batch_size": args.batch_size, "seed": args.seed, "lr": args.lr,
            "momentum": args.momentum, "schedule": args.schedule, "steps": step, "parameters": n_params,
            "train_images": int(train_x.shape[0]), "test_images": int(test_x.shape[0]),
            "test_accuracy": acc, "test_loss": test_loss,
            "final_train_loss": sum(mean_loss[-20:]) / len(mean_loss[-20:]),
            "loss": mean_loss,
            "step_time_s": step_max,
            "step_time_per_rank_s": stacked[:, 1, :].tolist(),
            "mean_step_time_s": statistics.fmean(timed),
            "median_step_time_s": statistics.median(timed),
            "warmup_steps_excluded": len(step_max) - len(timed),
            "rank0_phase_means_s": {
                name: statistics.fmean(ph[i] for ph in phases[WARMUP_STEPS:] or phases)
                for i, name in enumerate(["forward", "backward_with_allreduce", "optimizer"])},
            "allreduce_probe_s": allreduce_s,
            "median_allreduce_s": statistics.median(allreduce_s) if allreduce_s else None,
            "train_cpu_s_per_rank": stacked[:, 2, 0].tolist() if step else [],
            "train_wall_s": train_s, "init_process_group_s": init_s,
            "parameters_identical_on_all_ranks": identical,
        }
        if args.backend == "switchml":
            import switchml.torch
            try:
                result["switchml_stats"] = {k: v for k, v in dict(switchml.torch.stats()).items()}
            except Exception as e:  # stats are informative only
                result["switchml_stats"] = {"error": str(e)}
        write_json(args.out, result)
        print(f"{tag} done: {step} steps in {train_s:.1f} s, mean step {1000 * result['mean_step_time_s']:.1f} ms, "
              f"test accuracy {100 * acc:.2f}% (test loss {test_loss:.4f}), parameters identical on all "
              f"ranks: {identical}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if not identical:
        print(f"{tag} the ranks ended with different parameters", file=sys.stderr, flush=True)
    # Leave without the interpreter's finalization: torch 2.15's Gloo (plain `gloo` runs too, no
    # switchml loaded) sometimes aborts there ("terminate called without an active exception",
    # ~1 in 5 short runs on the 2-core VM), after everything above is written and flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if identical else 1)


# ---------------------------------------------------------------- compare

def compare(args):
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    a, b = runs
    steps = min(a["steps"], b["steps"])
    every = args.every or max(1, steps // 10)
    rows = sorted(set(list(range(every, steps + 1, every)) + [steps]))
    name_a, name_b = a["backend"], b["backend"]
    w = 13
    print(f"{'step':>6} | {'loss ' + name_a:>{w}} | {'loss ' + name_b:>{w}} | {'difference':>{w}}")
    for s in rows:
        # Mean over the K steps ending at s: smoother than a single mini-batch.
        lo = max(0, s - every)
        la = statistics.fmean(a["loss"][lo:s])
        lb = statistics.fmean(b["loss"][lo:s])
        print(f"{s:>6} | {la:>{w}.4f} | {lb:>{w}.4f} | {la - lb:>+{w}.4f}")
    acc_diff_pp = 100 * (a["test_accuracy"] - b["test_accuracy"])
    print()
    print(f"{'':<28} | {name_a:>{w}} | {name_b:>{w}}")
    print(f"{'final test accuracy':<28} | {100 * a['test_accuracy']:>{w - 1}.2f}% | {100 * b['test_accuracy']:>{w - 1}.2f}%")
    print(f"{'final test loss':<28} | {a['test_loss']:>{w}.4f} | {b['test_loss']:>{w}.4f}")
    print(f"{'train loss (last 20 steps)':<28} | {a['final_train_loss']:>{w}.4f} | {b['final_train_loss']:>{w}.4f}")
    print(f"{'mean step time':<28} | {1000 * a['mean_step_time_s']:>{w - 3}.1f} ms | {1000 * b['mean_step_time_s']:>{w - 3}.1f} ms")
    print(f"{'median step time':<28} | {1000 * a['median_step_time_s']:>{w - 3}.1f} ms | {1000 * b['median_step_time_s']:>{w - 3}.1f} ms")
    if a.get("median_allreduce_s") is not None and b.get("median_allreduce_s") is not None:
        print(f"{'all-reduce alone (median)':<28} | {1000 * a['median_allreduce_s']:>{w - 3}.1f} ms | {1000 * b['median_allreduce_s']:>{w - 3}.1f} ms")
    print(f"{'training wall time':<28} | {a['train_wall_s']:>{w - 2}.1f} s | {b['train_wall_s']:>{w - 2}.1f} s")
    cpu_a, cpu_b = a.get("train_cpu_s_per_rank"), b.get("train_cpu_s_per_rank")
    if cpu_a and cpu_b:
        print(f"{'CPU s per rank (training)':<28} | {statistics.fmean(cpu_a):>{w - 2}.1f} s | {statistics.fmean(cpu_b):>{w - 2}.1f} s")
    if args.switch_cpu_s is not None:
        print(f"{'CPU s of the switch process':<28} | {args.switch_cpu_s:>{w - 2}.1f} s | {'-':>{w}}")
    print(f"{'identical params on ranks':<28} | {str(a['parameters_identical_on_all_ranks']):>{w}} | {str(b['parameters_identical_on_all_ranks']):>{w}}")
    print()
    print(f"test accuracy difference ({name_a} - {name_b}): {acc_diff_pp:+.2f} percentage points")
    if args.out:
        combined = {"runs": {name_a: a, name_b: b}, "accuracy_difference_pp": acc_diff_pp,
                    "final_train_loss_difference": a["final_train_loss"] - b["final_train_loss"],
                    "label": args.label, "switch_cpu_s": args.switch_cpu_s}
        write_json(args.out, combined)
        print(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------- main

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="one process of a DDP training job")
    t.add_argument("--backend", required=True, choices=["switchml", "gloo"])
    t.add_argument("--rank", type=non_negative, required=True)
    t.add_argument("--world-size", type=positive, required=True)
    t.add_argument("--init-method", required=True, help="file:///path or tcp://addr:port")
    t.add_argument("--epochs", type=positive, default=1)
    t.add_argument("--batch-size", type=positive, default=64, help="per process (default 64)")
    t.add_argument("--lr", type=float, default=0.05)
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                   help="learning rate: cosine decay to 0 over the run (default) or constant")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--max-steps", type=non_negative, default=0, help="0 = every step of the epochs")
    t.add_argument("--train-subset", type=non_negative, default=0, help="first K training images (0 = all)")
    t.add_argument("--test-subset", type=non_negative, default=0, help="first K test images (0 = all)")
    t.add_argument("--log-every", type=positive, default=25)
    t.add_argument("--allreduce-probes", type=non_negative, default=20,
                   help="after training, time this many all-reduces of a gradient-sized tensor")
    t.add_argument("--timeout", type=positive, default=300, help="torch.distributed timeout, s")
    t.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    t.add_argument("--out", help="result JSON (written by rank 0; required there)")
    c = sub.add_parser("compare", help="two runs side by side")
    c.add_argument("runs", nargs=2)
    c.add_argument("--every", type=non_negative, default=0, help="loss row every K steps (0: 10 rows)")
    c.add_argument("--label", default="", help="stored in the combined JSON (e.g. loopback)")
    c.add_argument("--switch-cpu-s", type=float, help="CPU seconds the switch process used (recorded)")
    c.add_argument("--out")
    args = p.parse_args(argv)
    if args.cmd == "train":
        if args.rank >= args.world_size:
            p.error(f"--rank {args.rank} must be < --world-size {args.world_size}")
        if args.rank == 0 and not args.out:
            p.error("--out is required on rank 0")
        return train(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
