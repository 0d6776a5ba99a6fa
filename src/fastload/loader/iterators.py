"""FastLoader's iterators: DataLoader's, counting the batches they hand out (for
``state_dict``), naming a sample that fails to load, and handing out super-batches
(:mod:`fastload.loader.superbatch`) one batch at a time."""

from __future__ import annotations

import collections
from typing import Any, NoReturn

from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from fastload.loader.errors import NamingFetcher
from fastload.loader.superbatch import Grouping, RunPart, SuperBatch
from fastload.typed_torch import reraise

__all__ = ["CountingMultiProcessIter", "CountingSingleProcessIter"]


class _Failure:
    """The error a super-batch carries, raised in its place among the batches."""

    def __init__(self, error: BaseException | ExceptionWrapper) -> None:
        self.error = error

    def raise_it(self) -> NoReturn:
        # From the main process, the exception itself; from a worker, rebuilt from its
        # message: as DataLoader raises either.
        if isinstance(self.error, BaseException):
            raise self.error
        reraise(self.error)
        raise AssertionError("unreachable: reraise() raises")


class _Counting(_BaseDataLoaderIter):
    """Records on the epoch under way how many batches this iterator has handed out
    (and, at the last, tells Accelerate the epoch ends there). It holds no reference to
    the loader, as DataLoader's iterators do not: the count goes to the
    ``ResumableBatches`` it draws indices from. With a ``grouping``, the batches of
    indices go out in groups (prefetching counts groups) and come back as super-batches,
    handed out one batch at a time; ``handed_run`` says which super-batch collated at
    once the batch just handed out is part of (:class:`fastload.loader.contracts.HandsOutRuns`).
    """

    def __init__(self, loader: DataLoader[Any], grouping: Grouping | None = None) -> None:
        self._grouping = grouping
        self._pending: collections.deque[tuple[Any, RunPart | None]] = collections.deque()
        self.handed_run: RunPart | None = None
        self._handed = 0
        self._length = 0  # the epoch's batches
        super().__init__(loader)

    def _reset(self, loader: DataLoader[Any], first_iter: bool = False) -> None:
        self._pending.clear()
        self.handed_run = None
        self._handed = 0
        super()._reset(loader, first_iter)

    def _next_index(self) -> Any:
        first = next(self._sampler_iter)  # may raise StopIteration
        if self._grouping is None:
            return first
        return self._grouping.take(first, self._sampler_iter)

    def __next__(self) -> Any:
        progress = self._index_sampler.progress
        if not self._pending:
            try:
                data = super().__next__()
            except StopIteration:
                progress.close()
                raise
            if isinstance(data, SuperBatch):
                batches = data.unpack()
                whole = data.layout is not None
                self._pending.extend(
                    (batch, RunPart(data, index) if whole else None)
                    for index, batch in enumerate(batches)
                )
                if data.error is not None:
                    self._pending.append((_Failure(data.error), None))
            else:
                self._pending.append((data, None))
            self._length = len(self._index_sampler)  # once a message, not once a batch
        data, self.handed_run = self._pending.popleft()
        if isinstance(data, _Failure):
            data.raise_it()
        self._handed += 1
        progress.counted(self._handed, self._length)
        return data


class CountingSingleProcessIter(_Counting, _SingleProcessDataLoaderIter):
    """Loads in the main process, through :class:`NamingFetcher`."""

    def __init__(self, loader: DataLoader[Any], grouping: Grouping | None = None) -> None:
        super().__init__(loader, grouping)
        fetcher = self._dataset_fetcher
        self._dataset_fetcher = NamingFetcher(
            fetcher.dataset, fetcher.auto_collation, fetcher.collate_fn, fetcher.drop_last
        )


class CountingMultiProcessIter(_Counting, _MultiProcessingDataLoaderIter):
    """Loads in workers (whose start-up, ``WorkerInit``, names failing samples)."""
