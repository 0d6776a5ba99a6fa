"""``num_workers='tune'``: measure loaders with a few worker counts and prefetch depths."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from fastload.loader.workers import WorkerInit
from fastload.system import available_cpus

__all__ = ["one_pass", "tune_loader", "tune_workers", "worker_candidates"]


def worker_candidates(cpus: int) -> list[int]:
    """Worker counts ``'tune'`` tries: 0, powers of two below ``cpus``, and ``cpus``."""
    counts = {0, cpus}
    count = 1
    while count < cpus:
        counts.add(count)
        count *= 2
    return sorted(counts)


def tune_workers(
    make_loader: Callable[[int, int], Iterable[Any]],
    *,
    workers: Sequence[int],
    prefetch: Sequence[int] = (2, 4),
    batches: int = 20,
    throughput: Callable[[Iterable[Any], int], float] | None = None,
    progress: bool = False,
) -> tuple[int, int, dict[tuple[int, int], float]]:
    """Measure batches/s for each ``(num_workers, prefetch_factor)`` and return the best.

    ``make_loader(num_workers, prefetch_factor)`` builds a loader; ``throughput(loader,
    batches)`` measures it (default: the first batch untimed, start-up excluded, then
    ``batches`` batches). With 0 workers prefetch does not apply and is tried once.

    Returns:
        ``(best_workers, best_prefetch, {(workers, prefetch): batches_per_second})``.
    """
    from tqdm import tqdm

    measure = throughput or _batches_per_second
    settings = sorted({(w, p if w > 0 else 2) for w in workers for p in prefetch})
    curve: dict[tuple[int, int], float] = {}
    for num_workers, prefetch_factor in tqdm(settings, desc="workers", disable=not progress):
        curve[(num_workers, prefetch_factor)] = measure(
            make_loader(num_workers, prefetch_factor), batches
        )
    best = max(curve, key=lambda setting: (curve[setting], -setting[0]))  # ties: fewer workers
    return best[0], best[1], curve


def _batches_per_second(loader: Iterable[Any], batches: int) -> float:
    iterator = iter(one_pass(loader, batches + 1))
    next(iterator)  # worker start-up and the first batch are not the steady state
    start, count = time.perf_counter(), 0
    for _ in iterator:
        count += 1
    elapsed = time.perf_counter() - start
    return count / elapsed if elapsed > 0 else 0.0


def one_pass(loader: Iterable[Any], count: int) -> Iterator[Any]:
    """Up to ``count`` batches, starting new epochs if the loader runs out."""
    produced = 0
    while produced < count:
        empty = True
        for batch in loader:
            empty = False
            yield batch
            produced += 1
            if produced == count:
                return
        if empty:
            return


def tune_loader(
    dataset: Dataset[Any],
    batch_size: int | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    drop_last: bool,
    pin_memory: bool | None,
    worker_init_fn: Callable[[int], None] | None,
    prefetch_factor: int | None,
) -> tuple[int, int | None, str]:
    """``num_workers='tune'``: the worker count and prefetch factor of the loader over
    ``dataset`` with the most batches a second (each of :func:`worker_candidates`, with
    ``prefetch_factor`` or 2 and 4), and the measurements, as FastLoader's reason."""

    def trial(workers: int, prefetch: int) -> DataLoader[Any]:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=collate_fn,
            pin_memory=bool(pin_memory) and torch.cuda.is_available(),
            drop_last=drop_last,
            worker_init_fn=WorkerInit(worker_init_fn),
            prefetch_factor=prefetch if workers else None,
        )

    prefetch = (prefetch_factor,) if prefetch_factor is not None else (2, 4)
    workers, best_prefetch, curve = tune_workers(
        trial, workers=worker_candidates(available_cpus()), prefetch=prefetch
    )
    measured = ", ".join(f"{w}w/{p}: {rate:.1f}" for (w, p), rate in sorted(curve.items()))
    return workers, (best_prefetch if workers else None), f"tuned, batches/s {measured}"
