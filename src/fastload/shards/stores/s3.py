"""A shard set in S3 or S3-compatible object storage (``s3://bucket/prefix``): how its
objects, byte ranges and listing are read, and what its errors mean; the download into
the node's cache is :class:`~fastload.shards.stores.cached.CachedShards`'.

botocore retries throttling and 5xx responses with backoff (its standard mode:
exponential backoff with jitter per request, no client-wide rate limit that would slow
every download after one SlowDown), and gives up a stalled connection after 10 s. The
S3 client is made in each process on first use (a client made before a fork is not safe
to use in a forked worker), configured by the usual AWS variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...) and by
``options``, which go to ``boto3.client("s3", ...)``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastload.shards.format.index import INDEX, Shard, ShardIndexError
from fastload.shards.stores.cached import CachedShards

__all__ = ["S3Shards"]

CHUNK = 8 << 20  # bytes per ranged GET
_BODY_ATTEMPTS = 5
_setup = threading.Lock()  # a process's client is made once
# botocore's parsed service models, kept from the first client a process makes: a forked
# worker's client then skips parsing S3's model again, most of a new client's CPU time
_models: Any = None


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


class S3Shards(CachedShards):
    """The shard set at ``s3://bucket/prefix``: its index, and each shard as a local file
    on demand (see :class:`~fastload.shards.stores.cached.CachedShards`)."""

    @property
    def chunk(self) -> int:  # type: ignore[override]
        return CHUNK  # read at each download: a test may make the requests small

    def _connect(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"{url}: not an s3://bucket/prefix URL")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self._client: Any = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # a client stays in its process: a spawned worker makes its own
        return {**super().__getstate__(), "_client": None, "_pid": -1}

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
            max_pool_connections=max(10, 2 * self.parallel),
            # a stalled connection is given up after 10 s, not botocore's 60
            connect_timeout=10,
            read_timeout=10,
        )
        options = dict(self.options)
        if "config" in options:  # the caller's settings (timeouts, ...) win
            config = config.merge(options.pop("config"))
        return session.client("s3", config=config, **options)

    def _read_object(self, name: str) -> bytes:
        """The whole object; a body cut short while it is read is read again (with the
        backoff of :meth:`_fetch`), the last such error raised after the last attempt."""
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        for attempt in range(_BODY_ATTEMPTS):
            try:
                response = self.client().get_object(Bucket=self.bucket, Key=self.key(name))
                return bytes(response["Body"].read())
            except (IncompleteReadError, ResponseStreamingError, ReadTimeoutError):
                if attempt == _BODY_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable")

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

    def exists(self, name: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().head_object(Bucket=self.bucket, Key=self.key(name))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise self.explained(error, f"{self.url}/{name}") from None
        return True

    def read(self, name: str) -> bytes:
        try:
            return self._read_object(name)
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

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
