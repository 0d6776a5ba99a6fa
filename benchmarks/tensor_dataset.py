"""In-memory tensors: DataLoader vs the BatchSampler fix vs FastLoader vs plain indexing.

The setting of the article "Faster Data Loading in PyTorch" (shared/seeds/004): batches
of 8192 rows of 128 float64 features, shuffled, 100 batches per epoch. DataLoader calls
``__getitem__`` once per row and stacks the rows again; the fix users know passes a
``BatchSampler`` as the sampler (``batch_size=None``), so each batch is one
``dataset[list]``; FastLoader indexes once per batch with ``index_select``. Plain
indexing with a random permutation is the limit. Rounds are interleaved, medians after
a warm-up round; CPU ms per batch from ``getrusage``.

Usage:
    python benchmarks/tensor_dataset.py [--batches 100] [--rounds 3] [--plot]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, interleaved, plot, report
from fastload import FastLoader
from fastload.tools.measure import Measurement


def consume(loader) -> None:
    for _ in loader:
        pass


def timed(run: Callable[[], None]) -> Callable[[], tuple[float, float]]:
    """``run`` returning its wall seconds and CPU seconds (this process, no workers)."""

    def wrapper() -> tuple[float, float]:
        cpu, start = time.process_time(), time.perf_counter()
        run()
        return time.perf_counter() - start, time.process_time() - cpu

    return wrapper


def plain_indexing(features: torch.Tensor, batch_size: int) -> None:
    order = torch.randperm(len(features))
    for start in range(0, len(features), batch_size):
        features[order[start : start + batch_size]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    features = torch.rand(args.batch_size * args.batches, args.features, dtype=torch.float64)
    dataset = TensorDataset(features)
    batches = BatchSampler(RandomSampler(dataset), args.batch_size, drop_last=False)
    loaders = {
        "DataLoader": DataLoader(dataset, batch_size=args.batch_size, shuffle=True),
        "DataLoader, BatchSampler as sampler": DataLoader(
            dataset, sampler=batches, batch_size=None
        ),
        "FastLoader": FastLoader(dataset, batch_size=args.batch_size, shuffle=True),
    }
    variants = {
        name: timed(lambda loader=loader: consume(loader)) for name, loader in loaders.items()
    }
    variants["plain indexing"] = timed(lambda: plain_indexing(features, args.batch_size))
    results = interleaved(variants, rounds=args.rounds)
    rows = []
    for name, runs in results.items():
        assert not isinstance(runs, str), runs
        cpu = statistics.median(cpu for _, cpu in runs)
        rows.append(Row(name, Measurement(tuple(seconds for seconds, _ in runs)), args.batches,
                        {"CPU ms/batch": f"{1000 * cpu / args.batches:.1f}"}))  # fmt: skip
    result = report(
        "tensor_dataset",
        rows,
        baseline="DataLoader",
        unit="batches",
        settings=vars(args) | {"dtype": "float64", "shuffle": True},
    )
    fast, limit = rows[2].measurement.median, rows[3].measurement.median
    print(f"FastLoader / plain indexing: {fast / limit:.2f}x the time of the limit")
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
