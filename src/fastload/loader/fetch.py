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
)

from fastload.loader.errors import note_failure
from fastload.loader.proxy import DatasetProxy

__all__ = ["DatasetView", "IndexBatches", "passthrough_collate", "tensor_source"]


def tensor_source(
    dataset: Dataset[Any],
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None] | None:
    """The tensors behind a TensorDataset, or a Subset of one (``random_split``), with
    the index map the Subsets apply; None for any other dataset."""
    index_map: torch.Tensor | None = None
    while isinstance(dataset, Subset):
        outer = torch.as_tensor(dataset.indices, dtype=torch.long)
        index_map = outer if index_map is None else outer[index_map]
        dataset = dataset.dataset
    if type(dataset) is TensorDataset:  # a subclass may override __getitem__
        return dataset.tensors, index_map
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
    """

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset
        source = tensor_source(dataset)
        if source is None:
            raise TypeError(f"not an in-memory tensor dataset: {type(dataset).__name__}")
        self.tensors, self.index_map = source

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int] | torch.Tensor) -> Any:
        try:
            rows = torch.as_tensor(indices, dtype=torch.long)
            if self.index_map is not None:
                rows = self.index_map[rows]
            # index_select: one gather kernel, where tensor[rows] goes through advanced indexing
            return [tensor.index_select(0, rows) for tensor in self.tensors]
        except Exception as error:
            note_failure(error, self, list(indices))
            raise

    def __repr__(self) -> str:
        return f"DatasetView({self.dataset!r})"
