"""The objects under ``s3://bucket/prefix`` in S3 or S3-compatible object storage
(:class:`S3Bucket`): read whole, in parallel ranged GETs (each hedged), listed, written,
and what their errors mean; the node's cache of a shard set there is
:class:`~fastload.shards.stores.cached.CachedShards`'.

botocore retries throttling and 5xx responses with backoff (its standard mode:
exponential backoff with jitter per request, no client-wide rate limit that would slow
every download after one SlowDown), and gives up a stalled connection after 10 s. The
S3 client is made in each process on first use (a client made before a fork is not safe
to use in a forked worker), configured by the usual AWS variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...) and by
``options``, which go to ``boto3.client("s3", ...)``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastload._checks import check_int
from fastload.shards.format.index import INDEX, ShardIndexError
from fastload.shards.stores.bucket import TablePart
from fastload.shards.stores.hedging import Hedged

__all__ = ["S3Bucket"]

CHUNK = 8 << 20  # bytes per ranged GET
#: Bytes read from a body at a time: each read tells the hedging that bytes still come
#: (a connection moving under PIECE bytes in the hedging's floor, 0.5 s, counts as
#: stalled).
PIECE = 256 << 10
_BODY_ATTEMPTS = 5
_setup = threading.Lock()  # a process's client and thread pool are made once
# botocore's parsed service models, kept from the first client a process makes: a forked
# worker's client then skips parsing S3's model again, most of a new client's CPU time
_models: Any = None


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


class S3Bucket:
    """The objects under ``url`` (``s3://bucket/prefix``), through boto3: ``options`` go to
    ``boto3.client("s3", ...)``; a download makes ``parallel`` ranged GETs at once."""

    writable = True

    def __init__(
        self, url: str, *, options: dict[str, Any] | None = None, parallel: int = 4
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"{url}: not an s3://bucket/prefix URL")
        self.url = url.rstrip("/")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        #: The client's settings, for ``boto3.client("s3", ...)``.
        self.options = dict(options or {})
        self.parallel = check_int(parallel, "parallel", low=1)
        self.hedging = True
        self._client: Any = None
        self._pid = -1
        self._pool: ThreadPoolExecutor | None = None
        self._hedged: Hedged | None = None
        self._pool_pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # a client and threads stay in their process: a spawned worker makes its own
        return {**self.__dict__, "_client": None, "_pid": -1, "_pool": None,
                "_hedged": None, "_pool_pid": -1}  # fmt: skip

    @property
    def chunk(self) -> int:
        return CHUNK  # read at each download: a test may make the requests small

    @property
    def hedge_counts(self) -> dict[str, int]:
        return dict(self._hedged.counts) if self._hedged is not None else {}

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def client(self) -> Any:
        """This process's S3 client (a forked worker makes its own)."""
        with _setup:
            if self._pid != os.getpid():
                self._client, self._pid = self._new_client(), os.getpid()
        return self._client

    def _new_client(self) -> Any:
        try:
            from botocore.config import Config

            session = _session()
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"{self.url}: s3:// shards need boto3: pip install '.[s3]'"
            ) from error

        config = Config(
            retries={"mode": "standard", "max_attempts": 10},
            # a connection kept for each request at once: first attempts and hedges
            # (Hedged) and the member tables read beside them
            max_pool_connections=max(10, 4 * self.parallel),
            # a stalled connection is given up after 10 s, not botocore's 60
            connect_timeout=10,
            read_timeout=10,
        )
        options = dict(self.options)
        if "config" in options:  # the caller's settings (timeouts, ...) win
            config = config.merge(options.pop("config"))
        return session.client("s3", config=config, **options)

    # --- reading -------------------------------------------------------------------------

    def read(self, name: str) -> bytes:
        """The whole object; a body cut short while it is read is read again (with the
        backoff of :meth:`_get_range`)."""
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        for attempt in range(_BODY_ATTEMPTS):
            try:
                response = self.client().get_object(Bucket=self.bucket, Key=self.key(name))
                return bytes(response["Body"].read())
            except (IncompleteReadError, ResponseStreamingError, ReadTimeoutError) as error:
                if attempt == _BODY_ATTEMPTS - 1:
                    raise self.explained(error, f"{self.url}/{name}") from None
                time.sleep(0.1 * 2**attempt)
            except Exception as error:
                raise self.explained(error, f"{self.url}/{name}") from None
        raise AssertionError("unreachable")

    def listing(self) -> dict[str, int]:
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

    def download(
        self, name: str, part: Path, spans: list[tuple[int, int]], table: TablePart | None
    ) -> tuple[str, str | None]:
        """The spans in ``parallel`` ranged GETs at once, each hedged, written and hashed
        in order as they come; the table in one GET beside them."""
        pool, hedged = self._threads()
        beside: Future[str | None] | None = None
        if table is not None:
            beside = pool.submit(self._table_into, *table)
        try:
            digest = hashlib.sha256()
            with open(part, "wb") as file:
                for pieces in self._bodies(name, spans, pool, hedged):
                    for piece in pieces:
                        digest.update(piece)
                        file.write(piece)
        finally:
            table_sha256 = beside.result() if beside is not None else None  # never raises
        return digest.hexdigest(), table_sha256

    def _threads(self) -> tuple[ThreadPoolExecutor, Hedged]:
        with _setup:
            if self._pool is None or self._pool_pid != os.getpid():  # a fork's: its own
                self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="fastload-get")
                self._hedged = Hedged(self.parallel)
                self._pool_pid = os.getpid()
        assert self._hedged is not None
        self._hedged.enabled = self.hedging
        return self._pool, self._hedged

    def _bodies(
        self, name: str, spans: list[tuple[int, int]], pool: ThreadPoolExecutor, hedged: Hedged
    ) -> Iterator[list[bytes]]:
        def get(span: tuple[int, int]) -> list[bytes]:
            return hedged.call(lambda heard: self._get_range(name, span, heard))

        if len(spans) == 1:  # one request: no thread of its own
            yield get(spans[0])
            return
        yield from pool.map(get, spans)

    def _table_into(self, name: str, path: Path) -> str | None:
        """The object ``name`` written into ``path``; its SHA-256, None when it could not
        be read or written (its reader asks again, and says why it fails)."""
        try:
            data = self.read(name)
            path.write_bytes(data)
        except Exception:
            path.unlink(missing_ok=True)
            return None
        return hashlib.sha256(data).hexdigest()

    def _get_range(
        self, name: str, span: tuple[int, int], heard: Callable[[], None]
    ) -> list[bytes]:
        """One ranged GET, its body in pieces of :data:`PIECE` bytes, ``heard()`` as
        each arrives. botocore retries a request that fails (throttling, 5xx, a
        timeout); a body cut short while it is read is retried here, with the same
        backoff doubling from 0.1 s."""
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        first, last = span
        url = f"{self.url}/{name}"
        for attempt in range(_BODY_ATTEMPTS):
            try:
                response = self.client().get_object(
                    Bucket=self.bucket, Key=self.key(name), Range=f"bytes={first}-{last}"
                )
                heard()
                pieces, size = [], 0
                while piece := response["Body"].read(PIECE):
                    heard()
                    pieces.append(piece)
                    size += len(piece)
                if size != last - first + 1:
                    raise IncompleteReadError(actual_bytes=size, expected_bytes=last - first + 1)
                return pieces
            except (IncompleteReadError, ResponseStreamingError, ReadTimeoutError):
                if attempt == _BODY_ATTEMPTS - 1:
                    raise OSError(
                        f"{url}: bytes {first}-{last} cut short {_BODY_ATTEMPTS} times"
                    ) from None
                time.sleep(0.1 * 2**attempt)
            except Exception as error:
                raise self.explained(error, url) from None
        raise AssertionError("unreachable")

    # --- writing -------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().head_object(Bucket=self.bucket, Key=self.key(name))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise self.explained(error, f"{self.url}/{name}") from None
        return True

    def names(self, prefix: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2")
        try:
            keys = [entry["Key"] for page in pages.paginate(Bucket=self.bucket,
                    Prefix=self.key(prefix)) for entry in page.get("Contents", [])]  # fmt: skip
        except Exception as error:
            raise self.explained(error, f"{self.url}/{prefix}*") from None
        start = len(self.key(""))
        return sorted(key[start:] for key in keys)

    def write(self, name: str, data: bytes | Path) -> None:
        try:
            if isinstance(data, Path):  # in parts, in parallel, where it is large
                self.client().upload_file(str(data), self.bucket, self.key(name))
            else:
                self.client().put_object(Bucket=self.bucket, Key=self.key(name), Body=data)
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

    def delete(self, name: str) -> None:
        try:
            self.client().delete_object(Bucket=self.bucket, Key=self.key(name))
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

    def explained(self, error: Exception, where: str) -> Exception:
        """botocore's error as one a user can act on, naming the URL."""
        response = getattr(error, "response", None) or {}  # a streaming error has None
        code = response.get("Error", {}).get("Code", "")
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


def _session() -> Any:
    """A new boto3 session (boto3's default one caches the credentials it found first),
    sharing the service models parsed by the sessions of this process or its parent."""
    import boto3
    import botocore.session

    global _models
    core = botocore.session.get_session()
    if _models is None:
        _models = core.get_component("data_loader")
    else:
        core.register_component("data_loader", _models)
    return boto3.session.Session(botocore_session=core)
