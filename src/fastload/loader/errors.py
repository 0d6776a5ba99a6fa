"""A sample that fails to load is named on its exception.

DataLoader's fetch turns a batch of indices into samples; when ``dataset[37]`` raises,
its exception says nothing of 37. :class:`NamingFetcher` does what DataLoader's fetch
does and adds a note (the exception keeps its type and message) naming the index and,
where the dataset lists its files, the file. The user's dataset is not wrapped: in the
main process FastLoader's iterator uses the fetcher; in a worker, :func:`name_failures`
(run by the worker's start-up) makes the worker loop build it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Any

import torch
from torch.utils.data import Dataset
from torch.utils.data._utils.fetch import _MapDatasetFetcher

from fastload.loader.proxy import DatasetProxy
from fastload.loader.superbatch import Group, fetch_group
from fastload.seeds import SampleKey

__all__ = ["NamingFetcher", "describe_indices", "fetch_batch", "name_failures", "note_failure"]

_PREFIX = "fastload: raised while loading dataset "


def describe_indices(indices: Sequence[Any] | Any) -> str:
    """``index 37`` or ``indices [0, 1, ...]``; a seeded key (:class:`SampleKey`) names its
    index, and an index of another kind (a pair ``(37, 1)``) is shown as it is."""
    if not isinstance(indices, list):
        return f"index {_index_of(indices)}"
    shown = ", ".join(str(_index_of(i)) for i in indices[:8])
    more = f", ... ({len(indices)} in all)" if len(indices) > 8 else ""
    return f"indices [{shown}{more}]"


def _index_of(key: Any) -> Any:
    if isinstance(key, SampleKey):
        return key.sample_index
    if isinstance(key, torch.Tensor) and key.numel() == 1:
        return key.item()
    return int(key) if hasattr(key, "__index__") else key


def _file_of(dataset: Dataset[Any], index: Any) -> str | None:
    """The file of sample ``index`` where the dataset lists ``(path, target)`` samples
    (torchvision's and fastload's ImageFolder)."""
    samples = getattr(dataset, "samples", None)
    try:
        path = samples[index][0] if samples is not None else None
    except Exception:  # not a list of (path, target): nothing to add
        return None
    return path if isinstance(path, str) else None


def note_failure(error: BaseException, dataset: Dataset[Any], indices: Any) -> None:
    """Add the note naming ``indices`` (and the file of a single one) unless the error
    already carries one: the innermost naming is the most precise."""
    if any(note.startswith(_PREFIX) for note in getattr(error, "__notes__", ())):
        return
    where = describe_indices(indices)
    if not isinstance(indices, list):
        inner = getattr(dataset, "dataset", dataset)  # a view FastLoader made: its data set
        path = _file_of(inner, _index_of(indices))
        if path is not None:
            where += f" ({path})"
    error.add_note(_PREFIX + where)


def fetch_batch(dataset: Dataset[Any], indices: Sequence[Any]) -> Any:
    """``dataset.__getitems__(indices)``, a failure noted with the indices, and checked to
    hold one sample per index: a shorter batch would drop samples without a word (and,
    under ``seed=``, pair the rest with other samples' seeds).

    Raises:
        ValueError: ``__getitems__`` returned another number of samples; names the
            dataset and the indices.
    """
    try:
        samples = dataset.__getitems__(indices)  # type: ignore[attr-defined]
    except Exception as error:
        note_failure(error, dataset, list(indices))
        raise
    if isinstance(samples, Sized) and len(samples) != len(indices):
        raise ValueError(
            f"{type(dataset).__name__}.__getitems__ returned {len(samples)} samples for the "
            f"{len(indices)} {describe_indices(list(indices))}: it must return one sample "
            "per index, in their order"
        )
    return samples


class NamingFetcher(_MapDatasetFetcher):
    """DataLoader's map-style fetch, with a failing sample's index (and file) noted on
    its exception. A dataset's own ``__getitems__`` fetches a batch in one call: a
    failure there names the batch's indices, and a batch of another size is refused (the
    views FastLoader makes, which check their own, are trusted)."""

    def fetch(self, possibly_batched_index: Any) -> Any:
        if isinstance(possibly_batched_index, Group):  # a run of batches, sent as one
            return fetch_group(self, possibly_batched_index)
        return self.fetch_one(possibly_batched_index)

    def fetch_one(self, possibly_batched_index: Any) -> Any:
        """A batch (or the one sample) loaded and collated, as DataLoader's fetch makes it."""
        return self.collate_fn(self.load(possibly_batched_index))

    def load(self, possibly_batched_index: Any) -> Any:
        """The samples of a batch (or the one sample) of ``possibly_batched_index``,
        not yet collated."""
        if not self.auto_collation:
            return self._load(possibly_batched_index)
        if isinstance(self.dataset, DatasetProxy):
            return self.dataset.__getitems__(possibly_batched_index)
        if getattr(self.dataset, "__getitems__", None):
            return fetch_batch(self.dataset, possibly_batched_index)
        return [self._load(index) for index in possibly_batched_index]

    def _load(self, index: Any) -> Any:
        try:
            return self.dataset[index]
        except Exception as error:
            note_failure(error, self.dataset, index)
            raise


def name_failures() -> None:
    """In a worker process: have its loop fetch map-style batches with
    :class:`NamingFetcher`. DataLoader's worker loop builds its fetcher after the
    worker's start-up, through ``_DatasetKind.create_fetcher``; this process is the
    loader's worker and nothing else, so the change stays in it."""
    from torch.utils.data import _DatasetKind

    create: Callable[..., Any] = _DatasetKind.create_fetcher
    if getattr(create, "names_failures", False):
        return

    def create_fetcher(kind: int, dataset: Any, auto_collation: bool, collate_fn: Any,
                       drop_last: bool) -> Any:  # fmt: skip
        if kind == _DatasetKind.Map:
            return NamingFetcher(dataset, auto_collation, collate_fn, drop_last)
        return create(kind, dataset, auto_collation, collate_fn, drop_last)

    create_fetcher.names_failures = True  # type: ignore[attr-defined]
    _DatasetKind.create_fetcher = staticmethod(create_fetcher)  # type: ignore[method-assign]
