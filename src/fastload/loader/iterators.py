"""FastLoader's iterators: DataLoader's, counting the batches they hand out (for
``state_dict``) and naming a sample that fails to load."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from fastload.loader.errors import NamingFetcher

__all__ = ["CountingMultiProcessIter", "CountingSingleProcessIter"]


class _Counting(_BaseDataLoaderIter):
    """Records on the epoch under way how many batches this iterator has handed out
    (and, at the last, tells Accelerate the epoch ends there). It holds no reference to
    the loader, as DataLoader's iterators do not: the count goes to the
    ``ResumableBatches`` it draws indices from."""

    def __next__(self) -> Any:
        progress = self._index_sampler.progress
        try:
            data = super().__next__()
        except StopIteration:
            progress.close()
            raise
        progress.counted(self._num_yielded, len(self._index_sampler))
        return data


class CountingSingleProcessIter(_Counting, _SingleProcessDataLoaderIter):
    """Loads in the main process, through :class:`NamingFetcher`."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        super().__init__(loader)
        fetcher = self._dataset_fetcher
        self._dataset_fetcher = NamingFetcher(
            fetcher.dataset, fetcher.auto_collation, fetcher.collate_fn, fetcher.drop_last
        )


class CountingMultiProcessIter(_Counting, _MultiProcessingDataLoaderIter):
    """Loads in workers (whose start-up, ``WorkerInit``, names failing samples)."""
