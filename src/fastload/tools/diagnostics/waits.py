"""How long a training loop waits for each batch: ``fastload.timed``."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from fastload.loader.proxy import LoaderProxy

__all__ = ["TimedLoader", "WaitSummary", "synchronize", "timed"]


def synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class WaitSummary:
    """What a loop spent waiting for data and computing, per iteration."""

    waits: tuple[float, ...]
    computes: tuple[float, ...]

    @property
    def iterations(self) -> int:
        return len(self.waits)

    @property
    def wait_seconds(self) -> float:
        return sum(self.waits)

    @property
    def compute_seconds(self) -> float:
        return sum(self.computes)

    @property
    def wait_fraction(self) -> float:
        total = self.wait_seconds + self.compute_seconds
        return self.wait_seconds / total if total else 0.0

    def percentile(self, percent: float) -> float:
        """The wait that ``percent`` % of the iterations waited at most, by the nearest
        rank (a wait that happened; of two waits, p95 is the longer).

        Example:
            >>> WaitSummary((0.1, 0.3), (0.0, 0.0)).percentile(95)
            0.3
        """
        ranked = sorted(self.waits)
        return ranked[max(math.ceil(percent / 100 * len(ranked)) - 1, 0)]

    def __str__(self) -> str:
        if not self.waits:
            return "no iterations"
        mean_wait = 1000 * statistics.fmean(self.waits)
        p95 = 1000 * self.percentile(95)
        return (
            f"{self.iterations} iterations: waited {self.wait_seconds:.2f} s for data "
            f"({100 * self.wait_fraction:.1f}% of the loop), mean {mean_wait:.1f} ms, "
            f"p95 {p95:.1f} ms"
        )


class TimedLoader(LoaderProxy):
    """Iterate ``loader`` and record, for each iteration, the time spent waiting for the
    batch and the time until the next one was asked for (your step).

    Like the ``data_time`` meter of PyTorch's ImageNet example. ``synchronize`` waits
    for the GPU before each clock reading, so that asynchronous GPU work counts as
    compute rather than as the wait for the next batch.

    Example:
        >>> loop = timed([1, 2, 3])
        >>> [batch for batch in loop]
        [1, 2, 3]
        >>> loop.summary().iterations
        3
    """

    def __init__(
        self, loader: Iterable[Any], *, synchronize: torch.device | str | None = None
    ) -> None:
        self.loader = loader
        self.device = torch.device(synchronize) if synchronize is not None else None
        self.waits: list[float] = []
        self.computes: list[float] = []

    def __iter__(self) -> Iterator[Any]:
        self.waits, self.computes = [], []
        iterator = iter(self.loader)
        handed_out: float | None = None
        while True:
            synchronize(self.device)
            asked = time.perf_counter()
            if handed_out is not None:
                self.computes.append(asked - handed_out)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            handed_out = time.perf_counter()
            self.waits.append(handed_out - asked)
            yield batch

    def summary(self) -> WaitSummary:
        return WaitSummary(tuple(self.waits), tuple(self.computes))


def timed(loader: Iterable[Any], *, synchronize: torch.device | str | None = None) -> TimedLoader:
    """Wrap ``loader`` to record each iteration's data wait; see :class:`TimedLoader`.

    Args:
        loader: Any iterable of batches: a FastLoader, DataLoader, DataPrefetcher.
        synchronize: A device to wait for before each clock reading (a CUDA device, so
            that queued GPU work counts as compute); None waits for nothing.

    Returns:
        A :class:`TimedLoader`: iterate it as ``loader``, then read its ``summary()``.

    Raises:
        RuntimeError: A ``synchronize`` string that is not a device (torch's error).

    Example:
        >>> loop = timed(range(3))
        >>> for batch in loop:
        ...     pass  # the training step
        >>> summary = loop.summary()
        >>> summary.iterations, len(summary.waits), 0.0 <= summary.wait_fraction <= 1.0
        (3, 3, True)
    """
    return TimedLoader(loader, synchronize=synchronize)
