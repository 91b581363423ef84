"""What the PyTorch examples ddp_bench.py and fashion_mnist_ddp.py share (imported from this
folder, which Python puts first on sys.path for a script run from it): argparse value types and
an atomic JSON write."""

import argparse
import json
import os


def positive(v):
    """argparse type: an integer > 0."""
    n = int(v)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return n


def non_negative(v):
    """argparse type: an integer >= 0."""
    n = int(v)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return n


def write_json(path, doc):
    """Writes doc to path as JSON atomically (path.tmp, then renamed): a reader never sees half."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)
