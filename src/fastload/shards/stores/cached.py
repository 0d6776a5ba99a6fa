"""A shard set in object storage, each shard fetched whole into the node's cache before
its samples are read (:class:`CachedShards`), the same for every scheme: it composes the
scheme's :class:`~fastload.shards.stores.bucket.Bucket`, which reads the objects (S3's
:class:`~fastload.shards.stores.s3.S3Bucket`, the other stores'
:class:`~fastload.shards.stores.obstore_bucket.ObstoreBucket`).

A shard is downloaded by parallel ranged reads into a temporary file, its SHA-256
checked against the index, and only then renamed into the cache; one that fails its
hash after ``attempts`` downloads is an error naming the shard and its URL. The shards
go into the node's cache (:class:`~fastload.shards.stores.node_cache.NodeCache`): under
``cache_dir``, a folder per source and index that the cache owns and nothing else,
shared by the node's processes (one of them downloads a shard), evicted past
``cache_limit`` bytes by next use (each reader announces the shards it reads next:
:meth:`CachedShards.plan`, which the download-ahead calls).

A shard's member table inside its shard (index version 4) is the last bytes of the
shard's file, read by the dataset through the descriptor it reads the samples through.
One that is not is served (:func:`table_of`, unchecked: the reader checks every table
against the index) from where it is:

- beside its shard (version 3): an object of its own, brought in the shard's download (the
  bucket's, asked for both) and kept in the node's cache (:func:`keep_table`), trusted
  by the hash recorded beside it; else one whole GET, asked again while its SHA-256 is
  not the index's;
- of a scan of public tars: written beside the scanned index in the cache.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastload._checks import check_int
from fastload.shards.format.index import (
    INDEX,
    PROGRESS,
    Shard,
    ShardIndexError,
    parse_index,
    table_name,
)
from fastload.shards.stores.bucket import Bucket
from fastload.shards.stores.node_cache import READ_ONLY, NodeCache

__all__ = ["CachedShards", "byte_spans", "keep_table", "table_of", "table_wanted"]


def byte_spans(size: int, chunk: int) -> list[tuple[int, int]]:
    """``(first, last)`` byte ranges of about ``chunk`` bytes each covering ``size`` bytes,
    of equal sizes (no small tail costing a request of its own).

    Example:
        >>> byte_spans(10, 4)  # ~4: two ranges of 5, not 4 + 4 + 2
        [(0, 4), (5, 9)]
    """
    if size == 0:
        return []
    count = max(1, round(size / chunk))
    edges = [size * part // count for part in range(count + 1)]
    return [(first, after - 1) for first, after in itertools.pairwise(edges)]


class CachedShards:
    """The shard set in ``bucket``: its index, and each shard as a local file on demand,
    downloaded into the node's cache under ``cache_dir`` (at most ``cache_limit`` bytes)
    and checked against the index, up to ``attempts`` downloads.

    Example::

        shards = CachedShards(S3Bucket("s3://my-bucket/train"), cache_dir="/tmp/cache")
        shard_list, meta = shards.index()
        descriptor = shards.open(shard_list[0])  # downloaded first
    """

    def __init__(
        self,
        bucket: Bucket,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        attempts: int = 3,
    ) -> None:
        self.bucket, self.url = bucket, bucket.url
        self.attempts = check_int(attempts, "attempts", low=1)
        root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "fastload"
        self.node = NodeCache(root, self.url, cache_limit)

    @property
    def cache(self) -> Path:
        """The folder the current index's shards are cached in."""
        return self.node.folder

    @property
    def cache_limit(self) -> int | None:
        return self.node.limit

    # --- the index, and the shards as local files ----------------------------------------

    def index(self) -> tuple[list[Shard], dict[str, Any]]:
        """The shard set's index; for public WebDataset shards without one, the index
        made by one scan of them (each downloaded into the cache) and kept there. Sets
        the cache's namespace to this index's."""
        try:
            data = self.bucket.read(INDEX)
        except ShardIndexError as missing:
            self.node.use_index(None, frozenset())
            scanned = self._scanned_index(missing)
            shards, meta = parse_index(scanned.read_bytes(), str(scanned))
            self.node.use_index(None, frozenset(shard.name for shard in shards))
        else:
            shards, meta = parse_index(data, f"{self.url}/{INDEX}")
            names = frozenset(shard.name for shard in shards)
            self.node.use_index(hashlib.sha256(data).hexdigest(), names)
        return shards, meta

    def _scanned_index(self, missing: ShardIndexError) -> Path:
        with self.node.locked(".scan"):  # one process of the node scans
            return self._scan(missing)

    def _scan(self, missing: ShardIndexError) -> Path:
        from fastload.shards.format.scan import scan_tar, write_scanned_index

        path = self.cache / INDEX
        if path.exists():  # scanned before
            return path
        listing = self.bucket.listing()
        tars = sorted((name, size) for name, size in listing.items() if name.endswith(".tar"))
        if not tars or PROGRESS in listing:  # none, or a conversion of ours unfinished
            raise missing
        self.cache.mkdir(parents=True, exist_ok=True)
        self.node.use_index(None, frozenset(name for name, _ in tars))
        entries = []
        for name, size in tars:  # no hash to check yet: this scan records it
            entries.append(scan_tar(self.local_path(Shard(name, size, "", []))))
        # version 3: O(shards) in the index, each member table a file of the namespace
        return write_scanned_index(self.cache, entries, self.url)

    def table(self, shard: Shard) -> bytes:
        """The bytes of ``shard``'s member table, unchecked (see the module)."""
        return table_of(self, shard)

    def local_path(self, shard: Shard) -> Path:
        """The shard's file in the cache, downloaded and checked first if it is not there."""
        with self.node.locked(shard.name):
            path = self._cached(shard, use=None)
        assert path is not None  # a read makes room whatever the plans say
        return path

    def open(self, shard: Shard) -> int:
        """A read-only descriptor of the shard's file in the cache (downloaded first if
        need be), opened while the shard is locked: an eviction by another process cannot
        remove it in between, and one after leaves the open file readable."""
        with self.node.locked(shard.name):
            path = self._cached(shard, use=None)
            assert path is not None
            return os.open(path, os.O_RDONLY)

    def cached(self, shard: Shard) -> bool:
        """Whether the shard is in the cache, checked (and its member table beside it,
        where it has one): read without the shard's lock, so a hint for the download-ahead
        (:meth:`open` locks and checks again: a shard evicted since is fetched then)."""
        return self._checked(shard) and not table_wanted(self, shard)

    def prefetch(self, shard: Shard, use: int, claimed: Callable[[], None] = lambda: None) -> bool:
        """Download the shard now, for a read ``use`` places down this process's plan,
        and its member table (the workers that read it find both in the cache); not when
        it would evict a shard needed sooner (returns False). ``claimed()`` once its lock
        is taken, or found held (by the thread or process fetching it)."""
        with self._claimed(shard.name, claimed):
            if self._cached(shard, use=use) is None:
                return False
        if shard.table_sha256 and not shard.table_inside:
            self.table(shard)  # (fetched with the shard: read from the cache)
        return True

    @contextlib.contextmanager
    def _claimed(self, name: str, claimed: Callable[[], None]) -> Iterator[None]:
        """The shard's lock, ``claimed()`` as soon as it is taken or found held."""
        with self.node.locked(name, wait=False) as taken:
            if taken:
                claimed()
                yield
                return
        claimed()  # another thread or process fetches it: this one waits for its end
        with self.node.locked(name):
            yield

    def _cached(self, shard: Shard, *, use: int | None) -> Path | None:
        """(Under the shard's lock.) Its file, downloaded if absent or not the indexed
        one: a file is trusted by the SHA-256 recorded beside it when it was checked."""
        path = self.cache / shard.name
        if not self._checked(shard):
            if not self.node.make_room(shard.size, use):
                return None
            self._download(shard, path)
        self.node.used(path)
        return path

    def _checked(self, shard: Shard) -> bool:
        """Whether the shard's file is in the cache under a hash record that is the
        index's (any record, for a shard indexed without a hash: one being scanned,
        whose hash this node recorded when it came)."""
        if not (self.cache / shard.name).exists():
            return False
        checked = self.node.checked_hash(shard.name)
        return checked is not None and (not shard.sha256 or checked == shard.sha256)

    def _download(self, shard: Shard, path: Path) -> None:
        """The bucket's download of the shard (with its member table where the cache
        lacks it); the file enters the cache with its hash recorded beside it. A shard
        indexed without a hash (``""``: being scanned) is recorded with the one computed."""
        url = f"{self.url}/{shard.name}"
        part = self.node.part(shard.name)
        spans = byte_spans(shard.size, self.bucket.chunk)
        try:
            if self.node.read_only:
                raise OSError(errno.EROFS, "read-only")
            self._download_into(shard, part, spans, url)
        except OSError as error:
            if error.errno in READ_ONLY:
                raise OSError(
                    error.errno,
                    f"{self.cache}: the shard cache is read-only and {shard.name} "
                    "is not in it: give a writable cache_dir",
                ) from None
            if error.errno == errno.ENOSPC:
                raise OSError(
                    error.errno,
                    f"{self.cache}: no space left for {shard.name} "
                    f"({shard.size} bytes): free some, or give a smaller cache_limit or "
                    "another cache_dir",
                ) from None
            raise

    def _download_into(
        self, shard: Shard, part: Path, spans: list[tuple[int, int]], url: str
    ) -> None:
        try:
            for _attempt in range(self.attempts):
                sha256 = self._receive(shard, part, spans)
                if sha256 == shard.sha256 or not shard.sha256:
                    self.node.enter(part, shard.name, sha256)
                    return
        finally:
            part.unlink(missing_ok=True)  # nothing half-downloaded stays
        raise ShardIndexError(
            f"{url}: its SHA-256 differs from the index's after {self.attempts} downloads"
        )

    def _receive(self, shard: Shard, part: Path, spans: list[tuple[int, int]]) -> str:
        """The shard's spans written into ``part`` and, when the cache lacks it, its
        member table beside it, kept if its hash is the index's (one round trip for both:
        the reader that waits for the shard finds its table); the shard's SHA-256."""
        table = None
        if table_wanted(self, shard):
            name = table_name(shard.name)
            table = (name, self.node.part(name))
        try:
            sha256, table_sha256 = self.bucket.download(shard.name, part, spans, table)
        except BaseException:
            if table is not None:
                table[1].unlink(missing_ok=True)
            raise
        if table is not None:
            with self.node.locked(table[0]):
                keep_table(self, shard, table[1], table_sha256 or "")
        return sha256

    # --- what a reader tells the node's cache --------------------------------------------

    def plan(self, upcoming: list[str]) -> None:
        """Announce the shards this process reads next, soonest first (see NodeCache)."""
        self.node.plan(upcoming)

    def forget_plan(self) -> None:
        self.node.forget_plan()


# --- the member tables ---------------------------------------------------------------


def table_of(shards: CachedShards, shard: Shard) -> bytes:
    """The bytes of ``shard``'s member table beside it (see the module), unchecked."""
    name = table_name(shard.name)
    cached = _cached(shards, name, shard)
    if cached is None:
        shards.local_path(shard)  # its download brings the table, or one under way did
        cached = _cached(shards, name, shard)
    return cached if cached is not None else _into_cache(shards, shard)


def table_wanted(shards: CachedShards, shard: Shard) -> bool:
    """Whether ``shard`` has a member table beside it that is not in the cache."""
    node = shards.node
    wanted = shard.table_sha256 and not (shard.table_inside or node.read_only or node.scanned)
    return bool(wanted) and node.checked_hash(table_name(shard.name)) != shard.table_sha256


def keep_table(shards: CachedShards, shard: Shard, part: Path, digest: str) -> None:
    """(Under the table's lock.) ``part``, the table's bytes downloaded, enters the
    cache when ``digest``, their SHA-256, is the index's; it is removed otherwise."""
    try:
        if digest == shard.table_sha256:
            shards.node.enter(part, table_name(shard.name), digest)
    except OSError:  # a full disk: fetched again next time
        pass
    finally:
        part.unlink(missing_ok=True)


def _into_cache(shards: CachedShards, shard: Shard) -> bytes:
    """``shard``'s table fetched (unless a process of the node did meanwhile) and kept
    in the cache when its hash is the index's."""
    name = table_name(shard.name)
    with shards.node.locked(name):
        cached = _cached(shards, name, shard)
        if cached is not None:
            return cached
        data = _fetched(shards, name, shard)
        if not shards.node.read_only:
            part = shards.node.part(name)
            try:
                part.write_bytes(data)
            except OSError:  # a full or read-only disk: read it again next time
                part.unlink(missing_ok=True)
            else:
                keep_table(shards, shard, part, hashlib.sha256(data).hexdigest())
        return data


def _cached(shards: CachedShards, name: str, shard: Shard) -> bytes | None:
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


def _fetched(shards: CachedShards, name: str, shard: Shard) -> bytes:
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
