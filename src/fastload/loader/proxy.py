"""The base of the loader wrappers (DataPrefetcher, timed): len and attributes pass through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["LoaderProxy"]


class LoaderProxy:
    """Wraps ``self.loader``: ``len()`` and any attribute it lacks (``sampler``,
    ``dataset``, ``batch_size``) come from the loader, as in timm's PrefetchLoader."""

    loader: Iterable[Any]

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Guarded: before __init__ sets ``loader`` (unpickling), lookups would recurse.
        if name == "loader" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.loader, name)
