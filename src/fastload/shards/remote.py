"""A shard set in object storage (``s3://bucket/prefix``), each shard fetched whole into
a per-node cache before its samples are read.

A shard is downloaded by parallel ranged GETs into a temporary file, its SHA-256 checked
against the index, and only then renamed into the cache; one that fails its hash after
``attempts`` downloads is an error naming the shard and its URL. botocore retries
throttling and 5xx responses with backoff (its standard mode: exponential backoff with
jitter per request, no client-wide rate limit that would slow every download after one
SlowDown), and gives up a stalled connection after 10 s. The S3 client is made in
each process on first use (a client made before a fork is not safe to use in a
forked worker), configured by the usual AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...) and by ``options``, which go to
``boto3.client("s3", ...)``. The shards go into the node's cache
(:class:`~fastload.shards.cache.NodeCache`): under ``cache_dir``, a folder per source
and index that the cache owns and nothing else, shared by the node's processes (one of
them downloads a shard), evicted past ``cache_limit`` bytes by next use (each reader
announces the shards it reads next: :meth:`S3Shards.plan`, which
:class:`~fastload.shards.ShardShuffle` calls).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastload.shards.cache import READ_ONLY, NodeCache
from fastload.shards.index import INDEX, PROGRESS, Shard, ShardIndexError, parse_index

__all__ = ["S3Shards"]

CHUNK = 8 << 20  # bytes per ranged GET
_BODY_ATTEMPTS = 5
_setup = threading.Lock()  # a process's client and thread pool are made once


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


class S3Shards:
    """The shard set at ``url``: its index, and each shard as a local file on demand."""

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
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"{url}: not an s3://bucket/prefix URL")
        self.url, self.bucket, self.prefix = url.rstrip("/"), parsed.netloc, parsed.path.strip("/")
        self.options = dict(options or {})
        self.parallel, self.attempts = parallel, attempts
        root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "fastload"
        self.node = NodeCache(root, self.url, cache_limit)
        self._client: Any = None
        self._pid = -1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # a client and threads stay in their process: a spawned worker makes its own
        return {**self.__dict__, "_client": None, "_pid": -1, "_pool": None, "_pool_pid": -1}

    @property
    def cache(self) -> Path:
        """The folder the current index's shards are cached in."""
        return self.node.folder

    @property
    def cache_limit(self) -> int | None:
        return self.node.limit

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def client(self) -> Any:
        """This process's S3 client (a forked worker makes its own)."""
        with _setup:
            if self._pid != os.getpid():
                self._client, self._pid = self._new_client(), os.getpid()
        return self._client

    def _new_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            retries={"mode": "standard", "max_attempts": 10},
            max_pool_connections=max(10, 2 * self.parallel),
            # a stalled connection is given up after 10 s, not botocore's 60
            connect_timeout=10,
            read_timeout=10,
        )
        options = dict(self.options)
        if "config" in options:  # the caller's settings (timeouts, ...) win
            config = config.merge(options.pop("config"))
        # a session of its own: boto3's default one caches what it found first
        session = boto3.session.Session()
        return session.client("s3", config=config, **options)

    def index(self) -> tuple[list[Shard], dict[str, Any]]:
        """The shard set's index; for public WebDataset shards without one, the index
        made by one scan of them (each downloaded into the cache) and kept there. Sets
        the cache's namespace to this index's."""
        where = f"{self.url}/{INDEX}"
        try:
            data = self.client().get_object(Bucket=self.bucket, Key=self.key(INDEX))["Body"].read()
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
        from fastload.shards.scan import scan_tar, write_scanned_index

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
        return write_scanned_index(self.cache, entries, self.url)

    def _listing(self) -> dict[str, int]:
        """Name -> size of the objects right under the prefix."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        pages = self.client().get_paginator("list_objects_v2")
        try:
            return {
                entry["Key"][len(prefix) :]: int(entry["Size"])
                for page in pages.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
                for entry in page.get("Contents", [])
            }
        except Exception as error:
            raise self.explained(error, self.url) from None

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

    def prefetch(self, shard: Shard, use: int) -> bool:
        """Download the shard now, for a read ``use`` places down this process's plan;
        not when it would evict a shard needed sooner (returns False)."""
        with self.node.locked(shard.name):
            return self._cached(shard, use=use) is not None

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
        spans = byte_spans(shard.size, CHUNK)
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
                digest = hashlib.sha256()
                with open(part, "wb") as file:
                    for body in self._bodies(shard, spans, url):
                        digest.update(body)
                        file.write(body)
                if digest.hexdigest() == shard.sha256 or not shard.sha256:
                    self.node.enter(part, shard.name, digest.hexdigest())
                    return
        finally:
            part.unlink(missing_ok=True)  # nothing half-downloaded stays
        raise ShardIndexError(
            f"{url}: its SHA-256 differs from the index's after {self.attempts} downloads"
        )

    def _bodies(self, shard: Shard, spans: list[tuple[int, int]], url: str) -> Iterator[bytes]:
        if len(spans) == 1:  # one request: no thread
            yield self._fetch(shard, spans[0], url)
            return
        with _setup:
            if self._pool is None or self._pool_pid != os.getpid():  # a fork's: its own
                self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="fastload-get")
                self._pool_pid = os.getpid()
        yield from self._pool.map(lambda span: self._fetch(shard, span, url), spans)

    def _fetch(self, shard: Shard, span: tuple[int, int], url: str) -> bytes:
        """One ranged GET. botocore retries a request that fails (throttling, 5xx, a
        timeout); a body cut short while it is read is retried here, with the same
        backoff doubling from 0.1 s."""
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        first, last = span
        for attempt in range(_BODY_ATTEMPTS):
            try:
                response = self.client().get_object(
                    Bucket=self.bucket, Key=self.key(shard.name), Range=f"bytes={first}-{last}"
                )
                body = bytes(response["Body"].read())
                if len(body) != last - first + 1:
                    raise IncompleteReadError(actual_bytes=len(body),
                                              expected_bytes=last - first + 1)  # fmt: skip
                return body
            except (IncompleteReadError, ResponseStreamingError, ReadTimeoutError):
                if attempt == _BODY_ATTEMPTS - 1:
                    raise OSError(
                        f"{url}: bytes {first}-{last} cut short {_BODY_ATTEMPTS} times"
                    ) from None
                time.sleep(0.1 * 2**attempt)
            except Exception as error:
                raise self.explained(error, url) from None
        raise AssertionError("unreachable")

    def explained(self, error: Exception, where: str) -> Exception:
        """botocore's error as one a user can act on, naming the URL."""
        code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            return FileNotFoundError(f"{where}: the bucket {self.bucket!r} does not exist")
        if code in ("NoSuchKey", "404") and where.endswith(INDEX):
            return ShardIndexError(
                f"{where}: no {INDEX}: not a fastload shard set, or its conversion did not finish"
            )
        if code in ("NoSuchKey", "404"):
            return FileNotFoundError(f"{where}: no such object")
        if code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403"):
            return PermissionError(
                f"{where}: the endpoint refused the credentials ({code}): check "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the options given"
            )
        return OSError(f"{where}: {type(error).__name__}: {error}")

    # --- what a reader tells the node's cache --------------------------------------------

    def plan(self, upcoming: list[str]) -> None:
        """Announce the shards this process reads next, soonest first (see NodeCache)."""
        self.node.plan(upcoming)

    def forget_plan(self) -> None:
        self.node.forget_plan()
