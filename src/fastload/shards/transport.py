"""Where a shard set's bytes come from when they are not in a local folder: a
:class:`Transport` per URL scheme. ``s3://`` is :class:`~fastload.shards.remote.S3Shards`;
a second scheme is a new module with a class of this shape, named in :data:`SCHEMES`.

The dataset reads through ``open`` (a shard as a local file, fetched into the node's
cache first); ``ShardShuffle``'s prefetch thread calls ``plan`` and ``prefetch``, so that
the shards the next batches read are in the cache before the workers ask for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from fastload.shards.index import Shard
from fastload.shards.objects import SCHEMES as STORE_SCHEMES
from fastload.shards.objects import ObjectShards
from fastload.shards.remote import S3Shards

__all__ = ["SCHEMES", "Transport", "connect", "is_remote"]


class Transport(Protocol):
    """A shard set in object storage, as the readers use it."""

    url: str

    @property
    def cache_limit(self) -> int | None:
        """The byte budget of the node's shard cache (None: no limit)."""

    def index(self) -> tuple[list[Shard], dict[str, Any]]:
        """The shard set's index (its own, or a scan of its tars), checked."""

    def table(self, shard: Shard) -> bytes:
        """The bytes of ``shard``'s member table (index version 3 or 4), unchecked."""

    def open(self, shard: Shard) -> int:
        """A read-only descriptor of ``shard``, fetched into the cache if it is not."""

    def local_path(self, shard: Shard) -> Path:
        """``shard``'s file in the cache, fetched first if it is not there."""

    def prefetch(self, shard: Shard, use: int, claimed: Callable[[], None] = ...) -> bool:
        """Bring ``shard`` into the cache now, for a read ``use`` places down the plan;
        False when that would evict a shard needed sooner. ``claimed()`` is called once
        the shard is this call's to fetch, or found another's (a reader of it then waits
        for that fetch rather than starting its own)."""

    def plan(self, upcoming: list[str]) -> None:
        """The shard names this process reads next, soonest first (for eviction)."""

    def forget_plan(self) -> None:
        """This process reads nothing more (its plan stops holding shards)."""


#: URL scheme -> the transport that reaches it.
SCHEMES: dict[str, type[S3Shards] | type[ObjectShards]] = {
    "s3": S3Shards,
    **dict.fromkeys(STORE_SCHEMES, ObjectShards),
}


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL of a scheme in :data:`SCHEMES` (a local path otherwise).

    Example:
        >>> is_remote("s3://bucket/set"), is_remote("/data/set"), is_remote("C:/data")
        (True, False, False)
    """
    return isinstance(path, str) and urlparse(path).scheme in SCHEMES


def connect(
    url: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> Transport:
    """The transport of ``url``'s scheme."""
    transport = SCHEMES[urlparse(url).scheme]
    return transport(url, cache_dir=cache_dir, cache_limit=cache_limit, options=options)
