"""The member tables of a shard set in object storage, as
:class:`~fastload.shards.stores.cached.CachedShards` serves them to its readers:

- inside its shard (index version 4): the last bytes of the shard's file, once the shard
  is in the node's cache (a reader needs both: it waits for the shard's download, or
  makes it);
- beside it (version 3): an object of its own, brought in the shard's download (the
  bucket's, asked for both) and kept in the node's cache (:func:`keep_table`), trusted
  by the hash recorded beside it; else one whole GET, asked again while its SHA-256 is
  not the index's;
- of a scan of public tars: written beside the scanned index in the cache.

The reader checks every table against the index.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from fastload.shards.format.index import Shard, ShardIndexError, table_name
from fastload.shards.format.layout import table_at_end, table_place
from fastload.shards.stores.bucket import Bucket
from fastload.shards.stores.node_cache import NodeCache

__all__ = ["CachedSet", "keep_table", "table_of", "table_wanted"]


class CachedSet(Protocol):
    """What the tables need of a shard set in object storage (a
    :class:`~fastload.shards.stores.cached.CachedShards`)."""

    url: str
    attempts: int
    node: NodeCache
    bucket: Bucket

    @property
    def cache(self) -> Path:
        """The folder the current index's shards are cached in."""

    def open(self, shard: Shard) -> int:
        """A read-only descriptor of ``shard`` in the cache, fetched first if need be."""

    def local_path(self, shard: Shard) -> Path:
        """``shard``'s file in the cache, fetched first if need be."""


def table_of(shards: CachedSet, shard: Shard) -> bytes:
    """The bytes of ``shard``'s member table (see the module), unchecked."""
    if shard.table_inside:  # the shard's own last bytes: it brings its table
        descriptor = shards.open(shard)
        try:
            return table_at_end(descriptor, shard, table_place(shards.url, shard))
        finally:
            os.close(descriptor)
    name = table_name(shard.name)
    cached = _cached(shards, name, shard)
    if cached is None:
        shards.local_path(shard)  # its download brings the table, or one under way did
        cached = _cached(shards, name, shard)
    return cached if cached is not None else _into_cache(shards, shard)


def table_wanted(shards: CachedSet, shard: Shard) -> bool:
    """Whether ``shard`` has a member table beside it that is not in the cache."""
    node = shards.node
    wanted = shard.table_sha256 and not (shard.table_inside or node.read_only or node.scanned)
    return bool(wanted) and node.checked_hash(table_name(shard.name)) != shard.table_sha256


def keep_table(shards: CachedSet, shard: Shard, part: Path, digest: str) -> None:
    """(Under the table's lock.) ``part``, the table's bytes downloaded, enters the
    cache when ``digest``, their SHA-256, is the index's; it is removed otherwise."""
    try:
        if digest == shard.table_sha256:
            shards.node.enter(part, table_name(shard.name), digest)
    except OSError:  # a full disk: fetched again next time
        pass
    finally:
        part.unlink(missing_ok=True)


def _into_cache(shards: CachedSet, shard: Shard) -> bytes:
    """``shard``'s table fetched (unless a process of the node did meanwhile) and kept
    in the cache when its hash is the index's."""
    name = table_name(shard.name)
    with shards.node.locked(name):
        cached = _cached(shards, name, shard)
        if cached is not None:
            return cached
        data = _fetched(shards, name, shard)
        if not shards.node.read_only:
            part = shards.cache / f".{name}.part"
            try:
                part.write_bytes(data)
            except OSError:  # a full or read-only disk: read it again next time
                part.unlink(missing_ok=True)
            else:
                keep_table(shards, shard, part, hashlib.sha256(data).hexdigest())
        return data


def _cached(shards: CachedSet, name: str, shard: Shard) -> bytes | None:
    """The table in the cache: one downloaded, trusted by its recorded hash; one of a
    scan, written beside the scanned index (the reader checks its hash)."""
    path = shards.cache / name
    if shards.node.scanned:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise ShardIndexError(
                f"{path}: the member table of {shard.name} is missing from the scan kept "
                f"in the cache: remove {shards.cache} to scan the shards again"
            ) from None
    if not shard.table_sha256 or shards.node.checked_hash(name) != shard.table_sha256:
        return None
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _fetched(shards: CachedSet, name: str, shard: Shard) -> bytes:
    """The table's object, asked again up to ``attempts`` times while its SHA-256 is not
    the index's (a body damaged on the way); a missing one named as the table."""
    try:
        for _attempt in range(shards.attempts):
            data = shards.bucket.read(name)
            if hashlib.sha256(data).hexdigest() == shard.table_sha256:
                break
        return data
    except (ShardIndexError, FileNotFoundError):
        raise ShardIndexError(
            f"{shards.url}/{name}: the member table of {shard.name} is missing"
        ) from None
