"""A shard set in object storage, each shard fetched whole into the node's cache before
its samples are read: what every scheme shares (:class:`CachedShards`). A scheme's class
(S3's :class:`~fastload.shards.stores.s3.S3Shards`, the other stores'
:class:`~fastload.shards.stores.obstore_shards.ObjectShards`) says how to read an
object, a byte range of one, and the listing under the prefix, how to write one, and
what its errors mean.

A shard is downloaded by parallel ranged reads into a temporary file, its SHA-256
checked against the index, and only then renamed into the cache; one that fails its
hash after ``attempts`` downloads is an error naming the shard and its URL. The shards
go into the node's cache (:class:`~fastload.shards.stores.node_cache.NodeCache`): under
``cache_dir``, a folder per source and index that the cache owns and nothing else,
shared by the node's processes (one of them downloads a shard), evicted past
``cache_limit`` bytes by next use (each reader announces the shards it reads next:
:meth:`CachedShards.plan`, which :class:`~fastload.shards.ShardShuffle` calls). A
shard's member table comes with it: :mod:`~fastload.shards.stores.cached_tables`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastload._checks import check_int
from fastload.shards.format.index import (
    INDEX,
    PROGRESS,
    Shard,
    ShardIndexError,
    parse_index,
)
from fastload.shards.stores.cached_tables import table_beside, table_of
from fastload.shards.stores.hedging import Hedged
from fastload.shards.stores.node_cache import READ_ONLY, NodeCache

__all__ = ["CachedShards", "byte_spans"]

_setup = threading.Lock()  # a process's thread pool is made once


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


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
    """The shard set at ``url``: its index, and each shard as a local file on demand.
    A scheme's subclass gives :attr:`chunk` and implements :meth:`_read_object`,
    :meth:`_fetch` (or :meth:`_receive`, a shard's spans at once), :meth:`_listing`
    and :meth:`explained`; one that can be written to, :meth:`exists`, :meth:`read`,
    :meth:`names`, :meth:`write` and :meth:`delete` too."""

    #: Bytes per ranged read.
    chunk: int
    #: Whether the scheme's :meth:`_receive` brings a shard's member table itself
    #: (otherwise a thread beside the download does).
    tables_in_download = False

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        options: dict[str, Any] | None = None,
        parallel: int = 4,
        attempts: int = 3,
    ) -> None:
        self._connect(url)
        self.url = url.rstrip("/")
        #: The scheme's client settings (see its class).
        self.options = dict(options or {})
        self.parallel = check_int(parallel, "parallel", low=1)
        self.attempts = check_int(attempts, "attempts", low=1)
        #: Hedged reads (:mod:`~fastload.shards.stores.hedging`): a slow ranged GET asked again.
        self.hedging = True
        root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "fastload"
        self.node = NodeCache(root, self.url, cache_limit)
        self._pool: ThreadPoolExecutor | None = None
        self._hedged: Hedged | None = None
        self._pool_pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # threads stay in their process: a spawned worker makes its own
        return {**self.__dict__, "_pool": None, "_hedged": None, "_pool_pid": -1}

    @property
    def cache(self) -> Path:
        """The folder the current index's shards are cached in."""
        return self.node.folder

    @property
    def cache_limit(self) -> int | None:
        return self.node.limit

    # --- what a scheme implements --------------------------------------------------------

    def _connect(self, url: str) -> None:
        """Check ``url`` (ValueError when it is not the scheme's) and set
        the scheme's own attributes; its client is made later, in the process using it."""
        raise NotImplementedError

    def _read_object(self, name: str) -> bytes:
        """The whole object ``name`` under the prefix."""
        raise NotImplementedError

    def _fetch(self, shard: Shard, span: tuple[int, int], url: str) -> bytes:
        """Bytes ``span`` (first, last) of ``shard``, all of them or an error."""
        raise NotImplementedError

    def _listing(self) -> dict[str, int]:
        """Name -> size of the objects right under the prefix."""
        raise NotImplementedError

    def explained(self, error: Exception, where: str) -> Exception:
        """The scheme's error as one a user can act on, naming ``where``; a missing
        index is a :class:`ShardIndexError`."""
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        """Whether the object ``name`` is under the prefix."""
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        """The object ``name``, its errors explained."""
        raise NotImplementedError

    def names(self, prefix: str) -> list[str]:
        """The objects under the set's prefix whose names start with ``prefix``, sorted."""
        raise NotImplementedError

    def write(self, name: str, data: bytes | Path) -> None:
        """Put ``data`` (bytes, or a file's) as the object ``name``: whole or not at all."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    # --- the index, and the shards as local files ----------------------------------------

    def index(self) -> tuple[list[Shard], dict[str, Any]]:
        """The shard set's index; for public WebDataset shards without one, the index
        made by one scan of them (each downloaded into the cache) and kept there. Sets
        the cache's namespace to this index's."""
        where = f"{self.url}/{INDEX}"
        try:
            data = self._read_object(INDEX)
        except Exception as error:
            explained = self.explained(error, where)
            if not isinstance(explained, ShardIndexError):  # not a missing index
                raise explained from None
            self.node.use_index(None, frozenset())
            scanned = self._scanned_index(explained)
            shards, meta = parse_index(scanned.read_bytes(), str(scanned))
            self.node.use_index(None, frozenset(shard.name for shard in shards))
        else:
            shards, meta = parse_index(data, where)
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
        listing = self._listing()
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
        """The bytes of ``shard``'s member table, unchecked (see
        :mod:`~fastload.shards.stores.cached_tables`)."""
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
        checked = self.node.checked_hash(shard.name) if path.exists() else None
        # "": a shard being scanned, whose hash this node recorded when it came
        if checked is None or (shard.sha256 and checked != shard.sha256):
            if not self.node.make_room(shard.size, use):
                return None
            self._download(shard, path)
        self.node.used(path)
        return path

    def _download(self, shard: Shard, path: Path) -> None:
        """Ranged GETs, ``parallel`` at once, written and hashed in order as they come;
        the file enters the cache with its hash recorded beside it. A shard indexed
        without a hash (``""``: being scanned) is recorded with the one computed."""
        url = f"{self.url}/{shard.name}"
        part = path.with_name(f".{shard.name}.part")
        spans = byte_spans(shard.size, self.chunk)
        try:
            if self.node.read_only:
                raise OSError(errno.EROFS, "read-only")
            # a table beside the shard comes in the same download (the scheme's, or a thread's)
            beside = (
                contextlib.nullcontext() if self.tables_in_download else table_beside(self, shard)
            )
            with beside:
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
                sha256 = self._receive(shard, part, spans, url)
                if sha256 == shard.sha256 or not shard.sha256:
                    self.node.enter(part, shard.name, sha256)
                    return
        finally:
            part.unlink(missing_ok=True)  # nothing half-downloaded stays
        raise ShardIndexError(
            f"{url}: its SHA-256 differs from the index's after {self.attempts} downloads"
        )

    def _receive(self, shard: Shard, part: Path, spans: list[tuple[int, int]], url: str) -> str:
        """The spans of ``shard`` written in order into ``part``; their SHA-256."""
        digest = hashlib.sha256()
        with open(part, "wb") as file:
            for body in self._bodies(shard, spans, url):
                digest.update(body)
                file.write(body)
        return digest.hexdigest()

    def _bodies(self, shard: Shard, spans: list[tuple[int, int]], url: str) -> Iterator[bytes]:
        """Each span's bytes, in order: ``parallel`` ranged GETs at once, each hedged."""
        with _setup:
            if self._pool is None or self._pool_pid != os.getpid():  # a fork's: its own
                self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="fastload-get")
                self._hedged = Hedged(self.parallel)
                self._pool_pid = os.getpid()
        hedged = self._hedged
        assert hedged is not None
        hedged.enabled = self.hedging

        def fetch(span: tuple[int, int]) -> bytes:
            return hedged.call(lambda: self._fetch(shard, span, url))

        if len(spans) == 1:  # one request: no thread of its own
            yield fetch(spans[0])
            return
        yield from self._pool.map(fetch, spans)

    @property
    def hedge_counts(self) -> dict[str, int]:
        """This process's requests, hedges and hedges that answered first."""
        return dict(self._hedged.counts) if self._hedged is not None else {}

    # --- what a reader tells the node's cache --------------------------------------------

    def plan(self, upcoming: list[str]) -> None:
        """Announce the shards this process reads next, soonest first (see NodeCache)."""
        self.node.plan(upcoming)

    def forget_plan(self) -> None:
        self.node.forget_plan()
