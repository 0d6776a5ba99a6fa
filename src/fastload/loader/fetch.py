"""In-memory tensor datasets fetched a whole batch at a time: the view and its batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
)

from fastload.loader.errors import note_failure
from fastload.loader.proxy import DatasetProxy

__all__ = ["DatasetView", "IndexBatches", "passthrough_collate", "tensor_source"]


def tensor_source(
    dataset: Dataset[Any],
) -> tuple[tuple[torch.Tensor, ...], list[Subset[Any]]] | None:
    """The tensors behind a TensorDataset, or a Subset of one (``random_split``), with
    the Subsets from the outermost in; None for any other dataset (a subclass of either
    may change what a row is)."""
    subsets: list[Subset[Any]] = []
    while type(dataset) is Subset:
        subsets.append(dataset)
        dataset = dataset.dataset
    if type(dataset) is TensorDataset:
        return dataset.tensors, subsets
    return None


def _vectorised_order(sampler: Sampler[Any]) -> torch.Tensor | None:
    """One pass of a stock sampler as a tensor, drawn exactly as the sampler draws it.

    Covers ``SequentialSampler`` and ``RandomSampler`` without replacement (what
    ``shuffle=False/True`` create); None for any other sampler. The random draws mirror
    ``RandomSampler.__iter__`` call for call, so the generator ends in the same state and
    the next epoch matches too; tests/loader/test_loader.py pins this against DataLoader.
    """
    if type(sampler) is SequentialSampler:
        return torch.arange(len(sampler))
    if type(sampler) is not RandomSampler or sampler.replacement:
        return None
    size = len(sampler.data_source)
    generator = sampler.generator
    if generator is None:
        generator = torch.Generator()
        generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
    whole, rest = divmod(sampler.num_samples, size)
    parts = [torch.randperm(size, generator=generator) for _ in range(whole)]
    parts.append(torch.randperm(size, generator=generator)[:rest])
    return torch.cat(parts)


class IndexBatches(Sampler[torch.Tensor]):
    """The batches of a :class:`~torch.utils.data.BatchSampler`, as index tensors.

    Same sampler, same batches, but assembled without a Python loop over the indices:
    a stock sampler's order is drawn as one tensor and split; any other sampler is
    drained by NumPy in C. That matters when the fetch itself is one indexing
    operation (benchmarks/tensor_dataset.py).
    """

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.sampler = batch_sampler.sampler
        self.batch_size = batch_sampler.batch_size
        self.drop_last = batch_sampler.drop_last
        self._len = batch_sampler.__len__

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = _vectorised_order(self.sampler) if isinstance(self.sampler, Sampler) else None
        if order is not None:
            batches = torch.split(order, self.batch_size)
            if self.drop_last and batches and len(batches[-1]) < self.batch_size:
                batches = batches[:-1]
            yield from batches
            return
        indices = iter(self.sampler)  # may be endless: drain one batch at a time
        while True:
            batch = np.fromiter(itertools.islice(indices, self.batch_size), dtype=np.int64)
            if len(batch) == 0 or (self.drop_last and len(batch) < self.batch_size):
                return
            yield torch.from_numpy(batch)

    def __len__(self) -> int:
        return self._len()


def passthrough_collate(batch: Any) -> Any:
    """Collate for batches that the dataset view already assembled."""
    return batch


class DatasetView(DatasetProxy):
    """What FastLoader hands to DataLoader in place of an in-memory tensor dataset: it
    fetches a whole batch with one indexing operation, and adds the failing indices to
    an exception (as a note, so the exception keeps its type). Other attributes are read
    from the wrapped dataset, so ``loader.dataset.tensors`` and ``len(loader.dataset)``
    work.

    The tensors and the Subsets' indices are read at each batch, so data replaced between
    batches (a curriculum, active learning) is what the next batch holds. A batch the
    indexing cannot read exactly as ``default_collate`` of ``dataset[i]`` would (empty,
    not integers, out of range, negative) goes the plain way: DataLoader's result, or
    its error.
    """

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset
        if tensor_source(dataset) is None:
            raise TypeError(f"not an in-memory tensor dataset: {type(dataset).__name__}")
        # False once the loader's collate_fn is the user's: samples, not a batch
        self.collates = True
        self._maps: dict[int, tuple[Any, int, torch.Tensor | None]] = {}

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def rows(self, indices: Any) -> torch.Tensor | None:
        """The tensors' rows of a batch of indices (through the Subsets), or None where
        only the plain fetch gives DataLoader's result."""
        source = tensor_source(self.dataset)
        if source is None:  # the wrapped dataset was changed into another kind
            return None
        tensors, subsets = source
        rows = _integers(indices)
        for subset in subsets:
            index_map = self._index_map(subset)
            rows = None if rows is None or index_map is None else _through(index_map, rows)
        if rows is None:
            return None
        return _within(rows, tensors[0].shape[0])

    def take(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """The tensors' ``rows`` (from :meth:`rows`), one gather each."""
        tensors, _ = tensor_source(self.dataset)  # type: ignore[misc]
        # index_select: one gather kernel, where tensor[rows] goes through advanced indexing
        return [tensor.index_select(0, rows) for tensor in tensors]

    def _index_map(self, subset: Subset[Any]) -> torch.Tensor | None:
        """A Subset's indices as a tensor, made again when the Subset's ``indices`` is
        another object or another length; None where they are not integers."""
        indices = subset.indices
        kept = self._maps.get(id(subset))
        if kept is None or kept[0] is not indices or kept[1] != len(indices):
            kept = (indices, len(indices), _integers(indices, empty=True))
            self._maps[id(subset)] = kept
        return kept[2]

    def __getitems__(self, indices: list[int] | torch.Tensor) -> Any:
        try:
            if not self.collates:
                return self._samples(indices)
            rows = self.rows(indices)
            if rows is None:
                return default_collate(self._samples(indices))
            return self.take(rows)
        except Exception as error:
            note_failure(error, self, _listed(indices))
            raise

    def _samples(self, indices: Any) -> Any:
        """The batch's samples as DataLoader's fetch reads them (FastLoader's own index
        tensors as the lists of ints DataLoader's batch sampler makes; a tensor that is
        any other, element by element as DataLoader reads it: torch reads bools and
        uint8 as a mask, and refuses floats)."""
        if isinstance(indices, torch.Tensor):
            integers = _integers(indices, empty=True) is not None
            indices = indices.tolist() if integers else list(indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(indices)
        return [self.dataset[index] for index in indices]

    def __repr__(self) -> str:
        return f"DatasetView({self.dataset!r})"


def _listed(indices: Any) -> list[Any]:
    return indices.tolist() if isinstance(indices, torch.Tensor) else list(indices)


def _integers(indices: Any, *, empty: bool = False) -> torch.Tensor | None:
    """``indices`` as a 1-D int64 tensor, where they are integers (not bools, nor uint8,
    which torch reads as a mask); None otherwise, or where there are none (unless
    ``empty``)."""
    try:
        values = indices if isinstance(indices, torch.Tensor) else torch.as_tensor(indices)
    except Exception:  # ragged, too large, objects: the plain fetch decides
        return None
    if values.dim() != 1 or values.dtype in (torch.bool, torch.uint8) or values.is_floating_point():
        return None
    if values.is_complex() or (values.numel() == 0 and not empty):
        return None
    return values.to(torch.long)


def _within(rows: torch.Tensor, size: int) -> torch.Tensor | None:
    """``rows`` of a dimension of ``size``, a negative one counted from the end as
    Python and torch count it; None where one is out of range."""
    if rows.numel() == 0:
        return rows
    low, high = (int(value) for value in torch.aminmax(rows))
    if low < -size or high >= size:
        return None
    return rows if low >= 0 else torch.where(rows < 0, rows + size, rows)


def _through(index_map: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
    within = _within(rows, index_map.shape[0])
    return None if within is None else index_map.index_select(0, within)
