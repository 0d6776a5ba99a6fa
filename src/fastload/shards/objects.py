"""A shard set in object storage, through one maintained client for every store:
obstore (``pip install '.[cloud]'``; Rust's ``object_store`` underneath), at

- ``s3://bucket/prefix``: Amazon S3 and S3-compatible servers;
- ``gs://bucket/prefix``: Google Cloud Storage;
- ``az://container/prefix``: Azure Blob Storage;
- ``https://host/path`` (and ``http://``): any web server, read-only.

Credentials come the usual way for each cloud: the environment (``AWS_*``,
``GOOGLE_*``, ``AZURE_*``), the clouds' config files and instance credentials, or
``options`` (obstore's configuration keys: ``endpoint``, ``access_key_id``,
``service_account_path``, ``account_name``, ...; boto3's ``endpoint_url``,
``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token`` and
``region_name`` are read as their obstore names). An ``http://`` endpoint is allowed
when it is the one given. The client is made in each process on first use (a client
made before a fork is not safe to use in a forked worker).

obstore retries throttling, 5xx answers, dropped connections and timeouts of reads, with
exponential backoff and jitter; a request stalled for 10 s is given up and retried. A
body cut short on the way is read again here. The download into the node's cache is
:class:`~fastload.shards.fetched.CachedShards`'.

Example::

    shards = ObjectShards("gs://my-bucket/train", options={"service_account_path": "key.json"})
    shard_list, meta = shards.index()
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastload.shards.fetched import CachedShards
from fastload.shards.index import INDEX, Shard, ShardIndexError

__all__ = ["SCHEMES", "ObjectShards"]

#: URL schemes obstore reaches; the web ones are read-only.
SCHEMES = ("s3", "gs", "az", "https", "http")
CHUNK = 8 << 20  # bytes per ranged GET
_BODY_ATTEMPTS = 5
#: boto3's names for the S3 options, as obstore calls them.
_BOTO3_NAMES = {
    "endpoint_url": "endpoint", "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key", "aws_session_token": "session_token",
    "region_name": "region",
}  # fmt: skip
#: Where each cloud's endpoint may be set in the environment.
_ENDPOINT_VARIABLES = {"s3": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
                       "az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")}  # fmt: skip
_setup = threading.Lock()  # a process's client is made once


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


def store_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as obstore's ``from_url`` takes them: boto3's names translated, an
    ``http://`` endpoint allowed, the timeouts and retries set unless given.

    Example:
        >>> store_options("s3://b", {"endpoint_url": "http://127.0.0.1:9000"})["endpoint"]
        'http://127.0.0.1:9000'
    """
    given = {_BOTO3_NAMES.get(key, key): value for key, value in options.items()}
    client = dict(given.pop("client_options", {}))
    scheme = urlparse(url).scheme
    endpoint = str(given.get("endpoint") or "")
    if not endpoint:
        variables = _ENDPOINT_VARIABLES.get(scheme, ())
        endpoint = next((os.environ[v] for v in variables if os.environ.get(v)), "")
        if endpoint and scheme == "s3":
            given["endpoint"] = endpoint  # obstore reads AWS_ENDPOINT, not boto3's name
    if endpoint.startswith("http://") or scheme == "http":
        client.setdefault("allow_http", True)  # the endpoint asked for, not a downgrade
    client.setdefault("connect_timeout", timedelta(seconds=5))
    client.setdefault("timeout", timedelta(seconds=10))  # a stalled request is retried
    retry = {"max_retries": 10, "retry_timeout": timedelta(minutes=3),
             "backoff": {"init_backoff": timedelta(milliseconds=100),
                         "max_backoff": timedelta(seconds=15), "base": 2}}  # fmt: skip
    return {**given, "client_options": client, "retry_config": given.pop("retry_config", retry)}


class ObjectShards(CachedShards):
    """The shard set at ``url`` (``s3://``, ``gs://``, ``az://``, ``https://``): its
    index, and each shard as a local file on demand (see
    :class:`~fastload.shards.fetched.CachedShards`)."""

    @property
    def chunk(self) -> int:  # type: ignore[override]
        return CHUNK  # read at each download: a test may make the requests small

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
        if parsed.scheme not in SCHEMES or not parsed.netloc:
            raise ValueError(
                f"{url}: not a URL of object storage ({', '.join(f'{s}://' for s in SCHEMES)})"
            )
        super().__init__(url, cache_dir=cache_dir, cache_limit=cache_limit,
                         parallel=parallel, attempts=attempts)  # fmt: skip
        self.options = dict(options or {})
        self.writable = parsed.scheme not in ("https", "http")
        self._store: Any = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # a client stays in its process: a spawned worker makes its own
        return {**super().__getstate__(), "_store": None, "_pid": -1}

    def store(self) -> Any:
        """This process's obstore store, rooted at the URL (a forked worker makes its own)."""
        with _setup:
            if self._pid != os.getpid():
                self._store, self._pid = self._new_store(), os.getpid()
        return self._store

    def _new_store(self) -> Any:
        try:
            from obstore.store import from_url
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"{self.url}: shards in object storage need obstore: pip install '.[cloud]'"
            ) from error
        try:
            return from_url(self.url, **store_options(self.url, self.options))
        except Exception as error:
            raise ValueError(f"{self.url}: {type(error).__name__}: {error}") from None

    # --- what CachedShards reads through -------------------------------------------------

    def _read_object(self, name: str) -> bytes:
        """The whole object; a body cut short while it is read is read again."""
        import obstore

        return self._again_if_cut(name, lambda: bytes(obstore.get(self.store(), name).bytes()))

    def _fetch(self, shard: Shard, span: tuple[int, int], url: str) -> bytes:
        """One ranged GET, all of its bytes or an error naming ``url``."""
        import obstore

        first, last = span

        def ranged() -> bytes:
            body = bytes(obstore.get_range(self.store(), shard.name, start=first, end=last + 1))
            if len(body) != last - first + 1:
                raise _CutShort(f"{len(body)} of {last - first + 1} bytes")
            return body

        try:
            return self._again_if_cut(shard.name, ranged)
        except _CutShort:
            raise OSError(f"{url}: bytes {first}-{last} cut short {_BODY_ATTEMPTS} times") from None
        except Exception as error:
            raise self.explained(error, url) from None

    def _again_if_cut(self, name: str, read: Any) -> bytes:
        """``read()``, again with backoff doubling from 0.1 s while the answer is cut short
        or fails on the way (obstore retries a request, not a body read half-way); an
        answer the store gave (missing, refused) is not asked again."""
        for attempt in range(_BODY_ATTEMPTS):
            try:
                return bytes(read())
            except (*_missing(), *_refused()):
                raise
            except Exception:
                if attempt == _BODY_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable")

    def _listing(self) -> dict[str, int]:
        """Name -> size of the objects right under the prefix."""
        import obstore

        try:
            found = obstore.list_with_delimiter(self.store())
        except Exception as error:
            raise self.explained(error, self.url) from None
        return {entry["path"]: int(entry["size"]) for entry in found["objects"]}

    def explained(self, error: Exception, where: str) -> Exception:
        """obstore's error as one a user can act on, naming ``where``."""
        if isinstance(error, _missing()) and where.endswith(f"/{INDEX}"):
            return ShardIndexError(
                f"{where}: no {INDEX}: not a fastload shard set, or its conversion did not finish"
            )
        if isinstance(error, _missing()):
            return FileNotFoundError(f"{where}: no such object (or no such bucket)")
        if isinstance(error, _refused()):
            return PermissionError(
                f"{where}: the store refused the credentials: check the cloud's variables "
                f"(AWS_*, GOOGLE_*, AZURE_*) or the storage options given ({first_line(error)})"
            )
        if isinstance(error, OSError | ValueError) and str(error).startswith(self.url):
            return error  # already explained
        return OSError(f"{where}: {type(error).__name__}: {first_line(error)}")

    # --- what a conversion writes through ------------------------------------------------

    def exists(self, name: str) -> bool:
        import obstore

        try:
            obstore.head(self.store(), name)
        except _missing():
            return False
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None
        return True

    def read(self, name: str) -> bytes:
        try:
            return self._read_object(name)
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

    def names(self, prefix: str) -> list[str]:
        """The objects whose names start with ``prefix``, under the set's prefix."""
        import obstore

        try:
            return sorted(entry["path"] for batch in obstore.list(self.store(), prefix=prefix)
                          for entry in batch)  # fmt: skip
        except Exception as error:
            raise self.explained(error, f"{self.url}/{prefix}*") from None

    def write(self, name: str, data: bytes | Path) -> None:
        """Put ``data`` (bytes, or a file's) as the object ``name``: whole or not at all."""
        import obstore

        self._writable(name)
        # Google's XML API takes an object up to 5 TiB in one request; the others upload
        # a large file in parts
        multipart = None if urlparse(self.url).scheme != "gs" else False
        try:
            obstore.put(self.store(), name, data, use_multipart=multipart)
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

    def delete(self, name: str) -> None:
        import obstore

        self._writable(name)
        try:
            obstore.delete(self.store(), name)
        except Exception as error:
            raise self.explained(error, f"{self.url}/{name}") from None

    def _writable(self, name: str) -> None:
        if not self.writable:
            raise PermissionError(f"{self.url}/{name}: a web server's shards are read-only")


def _missing() -> tuple[type[Exception], ...]:
    """What obstore raises for an object or bucket that is not there."""
    from obstore.exceptions import NotFoundError

    return (NotFoundError, FileNotFoundError)


def _refused() -> tuple[type[Exception], ...]:
    """What obstore raises for credentials the store refused."""
    from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

    return (PermissionDeniedError, UnauthenticatedError, PermissionError)


class _CutShort(Exception):
    """A ranged answer with fewer bytes than asked for."""


def first_line(error: Exception) -> str:
    """obstore's message without its debug dump."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
