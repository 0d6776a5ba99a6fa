"""In-memory tensors: DataLoader vs FastLoader vs plain tensor indexing.

The setting of the article "Faster Data Loading in PyTorch" (shared/seeds/004): batches
of 8192 rows of 128 float64 features, shuffled, 100 batches per epoch. DataLoader calls
``__getitem__`` once per row and stacks the rows again; FastLoader indexes once per batch.
Plain indexing with a random permutation is the limit.

Usage:
    python benchmarks/tensor_dataset.py [--batches 100] [--repeats 5] [--plot]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from common import Row, plot, report
from fastload import FastLoader
from fastload.tools.measure import measure


def consume(loader) -> None:
    for _ in loader:
        pass


def plain_indexing(features: torch.Tensor, batch_size: int) -> None:
    order = torch.randperm(len(features))
    for start in range(0, len(features), batch_size):
        features[order[start : start + batch_size]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    features = torch.rand(args.batch_size * args.batches, args.features, dtype=torch.float64)
    dataset = TensorDataset(features)
    # DataLoader is ~30x slower: fewer repeats keep the script short, the median still holds.
    variants = {
        "DataLoader": (
            lambda: consume(DataLoader(dataset, batch_size=args.batch_size, shuffle=True)),
            3,
        ),
        "FastLoader": (
            lambda: consume(FastLoader(dataset, batch_size=args.batch_size, shuffle=True)),
            args.repeats,
        ),
        "plain indexing": (lambda: plain_indexing(features, args.batch_size), args.repeats),
    }
    rows = [
        Row(name, measure(run, repeats=repeats, warmup=1), items=args.batches)
        for name, (run, repeats) in variants.items()
    ]
    result = report(
        "tensor_dataset",
        rows,
        baseline="DataLoader",
        unit="batches",
        settings=vars(args) | {"dtype": "float64", "shuffle": True},
    )
    fast, limit = rows[1].measurement.median, rows[2].measurement.median
    print(f"FastLoader / plain indexing: {fast / limit:.2f}x the time of the limit")
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
