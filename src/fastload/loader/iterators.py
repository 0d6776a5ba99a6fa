"""FastLoader's iterators: DataLoader's, counting the batches they hand out (for
``state_dict``), naming a sample that fails to load, and handing out super-batches
(:mod:`fastload.loader.superbatch`) one batch at a time, in DataLoader's order."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from fastload.loader.errors import NamingFetcher
from fastload.loader.superbatch import (
    BatchFailure,
    Group,
    Grouping,
    RunPart,
    SuperBatch,
    interleave,
)
from fastload.typed_torch import pin_memory

__all__ = ["CountingMultiProcessIter", "CountingSingleProcessIter"]

#: DataLoader's handling of a worker's message (torch leaves it untyped): its
#: bookkeeping, the next index sent, and the data (a worker's failure raised).
_process_message: Callable[..., Any] = _MultiProcessingDataLoaderIter._process_data


class _Counting(_BaseDataLoaderIter):
    """Records on the epoch under way how many batches this iterator has handed out
    (and, at the last, tells Accelerate the epoch ends there). It holds no reference to
    the loader, as DataLoader's iterators do not: the count goes to the
    ``ResumableBatches`` it draws indices from. A batch that failed counts as handed out:
    its error is raised in its place, as DataLoader raises it, and the next ``next()``
    goes on with the batch after it.

    With a ``grouping``, the batches of indices are dealt in rounds of groups
    (prefetching counts groups), each group to the worker DataLoader would have sent its
    batches to; a round's super-batches come back in order and are handed out one batch
    at a time in the epoch's order. ``handed_run`` says which super-batch collated at once
    the batch just handed out is part of (:class:`fastload.loader.contracts.HandsOutRuns`).
    """

    def __init__(self, loader: DataLoader[Any], grouping: Grouping | None = None) -> None:
        self._grouping = grouping
        self._dealt: collections.deque[Group] = collections.deque()  # a round's, not yet sent
        self._sent: collections.deque[Group] = collections.deque()  # sent, not yet received
        self._round: list[SuperBatch] = []  # the round's super-batches received so far
        self._pending: collections.deque[tuple[Any, RunPart | None]] = collections.deque()
        self.handed_run: RunPart | None = None
        self._handed = 0
        self._length: int | None = 0  # the epoch's batches (None: the sampler cannot tell)
        super().__init__(loader)

    def _reset(self, loader: DataLoader[Any], first_iter: bool = False) -> None:
        self._dealt.clear()
        self._sent.clear()
        self._round = []
        self._pending.clear()
        self.handed_run = None
        self._handed = 0
        super()._reset(loader, first_iter)

    def _next_index(self) -> Any:
        if self._grouping is None:
            return next(self._sampler_iter)  # may raise StopIteration
        if not self._dealt:
            self._dealt.extend(self._grouping.deal(self._sampler_iter))
        group = self._dealt.popleft()
        self._sent.append(group)
        return group

    def __next__(self) -> Any:
        batches = self._index_sampler
        if not self._pending:
            try:
                self._receive()
            except StopIteration:
                batches.progress.ended()
                raise
        data, self.handed_run = self._pending.popleft()
        self._handed += 1
        batches.progress.counted(self._handed, self._length)
        if isinstance(data, BatchFailure):
            batches.failed()
            data.raise_it()
        return data

    def _receive(self) -> None:
        """The next message's batches (a round's, with super-batches), queued in order. A
        round received in part (a timeout, an interrupt) is kept for the next call."""
        while True:
            data = super().__next__()
            self._length = _length(self._index_sampler)  # once a message, not once a batch
            if self._grouping is None:
                self._pending.append((data, None))
                return
            group = self._sent.popleft()  # messages come in the order sent (in_order)
            if not isinstance(data, SuperBatch):  # the group failed whole: each of its batches
                data = SuperBatch([BatchFailure(data.error) for _ in group.batches], of=group.of)
            self._round.append(data)
            if len(self._round) == group.of:
                self._pending.extend(interleave(self._round))
                self._round = []
                return


def _length(batches: Any) -> int | None:
    """The epoch's batches, where its sampler knows them (one without ``__len__``, as an
    endless one, does not)."""
    try:
        return len(batches)
    except TypeError:
        return None


class CountingSingleProcessIter(_Counting, _SingleProcessDataLoaderIter):
    """Loads in the main process, through :class:`NamingFetcher`."""

    def __init__(self, loader: DataLoader[Any], grouping: Grouping | None = None) -> None:
        super().__init__(loader, grouping)
        fetcher = self._dataset_fetcher
        self._dataset_fetcher = NamingFetcher(
            fetcher.dataset, fetcher.auto_collation, fetcher.collate_fn, fetcher.drop_last
        )

    def _next_data(self) -> Any:
        index = self._next_index()  # may raise StopIteration: a sampler's error is not a batch's
        try:
            data = self._dataset_fetcher.fetch(index)
        except StopIteration:
            raise
        except Exception as error:
            return BatchFailure(error)
        if self._pin_memory:
            data = pin_memory(data, self._pin_memory_device)
        return data


class CountingMultiProcessIter(_Counting, _MultiProcessingDataLoaderIter):
    """Loads in workers (whose start-up, ``WorkerInit``, names failing samples)."""

    def _process_data(self, data: Any, *worker: int) -> Any:
        # torch >= 2.6 passes the worker's index (in_order's bookkeeping); 2.4 does not
        if isinstance(data, ExceptionWrapper):
            _process_message(self, None, *worker)  # its bookkeeping, and the next send
            return BatchFailure(data)
        return _process_message(self, data, *worker)
