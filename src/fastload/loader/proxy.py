"""The bases of the wrappers: of loaders (DataPrefetcher, timed) and of the datasets
FastLoader hands to DataLoader; len and attributes pass through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch.utils.data import Dataset

from fastload.typed_torch import length

__all__ = ["DatasetProxy", "LoaderProxy"]


class LoaderProxy:
    """Wraps ``self.loader``: ``len()`` and any attribute it lacks (``sampler``,
    ``dataset``, ``batch_size``) come from the loader, as in timm's PrefetchLoader."""

    loader: Iterable[Any]

    def __len__(self) -> int:
        return length(self.loader)

    def __getattr__(self, name: str) -> Any:
        # Guarded: before __init__ sets ``loader`` (unpickling), lookups would recurse.
        if name == "loader" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.loader, name)


class DatasetProxy(Dataset[Any]):
    """Wraps ``self.dataset``: ``len()`` and any attribute it lacks (``classes``,
    ``tensors``) come from the dataset, so code reading ``loader.dataset`` still works."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return length(self.dataset)

    def __getattr__(self, name: str) -> Any:
        # Guarded: during unpickling `dataset` is not set yet and lookups would recurse.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)
