"""What a shard set in object storage is to its readers: a :class:`Transport`, the node's
cache of the set (:class:`~fastload.shards.stores.cached.CachedShards`) over the bucket of
the URL's scheme (:mod:`fastload.shards.stores.connect` picks it). A second scheme is a
new module with a :class:`~fastload.shards.stores.bucket.Bucket` of its own, named in
:data:`~fastload.shards.stores.connect.SCHEMES`.

The dataset reads through ``open`` (a shard as a local file, fetched into the node's
cache first); the download-ahead thread (:mod:`~fastload.shards.stores.download_ahead`)
calls ``plan``, ``cached`` and ``prefetch``, so that the shards the next batches read
are in the cache before the workers ask for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fastload.shards.format.index import Shard

__all__ = ["Transport"]


class Transport(Protocol):
    """A shard set in object storage, as the readers use it."""

    url: str

    @property
    def cache_limit(self) -> int | None:
        """The byte budget of the node's shard cache (None: no limit)."""

    def index(self) -> tuple[list[Shard], dict[str, Any]]:
        """The shard set's index (its own, or a scan of its tars), checked."""

    def table(self, shard: Shard) -> bytes:
        """The bytes of ``shard``'s member table beside it (index version 3), unchecked
        (one inside its shard, version 4, is the end of the file :meth:`open` gives)."""

    def open(self, shard: Shard) -> int:
        """A read-only descriptor of ``shard``, fetched into the cache if it is not."""

    def local_path(self, shard: Shard) -> Path:
        """``shard``'s file in the cache, fetched first if it is not there."""

    def cached(self, shard: Shard) -> bool:
        """Whether ``shard`` (and its member table) is in the cache now, checked: a hint
        taken without its lock (a read still locks and checks it)."""

    def prefetch(self, shard: Shard, use: int, claimed: Callable[[], None] = ...) -> bool:
        """Bring ``shard`` into the cache now, for a read ``use`` places down the plan;
        False when that would evict a shard needed sooner. ``claimed()`` is called once
        the shard is this call's to fetch, or found another's (a reader of it then waits
        for that fetch rather than starting its own)."""

    def plan(self, upcoming: list[str]) -> None:
        """The shard names this process reads next, soonest first (for eviction)."""

    def forget_plan(self) -> None:
        """This process reads nothing more (its plan stops holding shards)."""
