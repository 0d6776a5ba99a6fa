"""The objects under a prefix in Google Cloud Storage (``gs://bucket/prefix``), Azure
Blob Storage (``az://container/prefix``) or on a web server (``https://host/path``,
read-only) (:class:`ObstoreBucket`), through obstore (``pip install '.[cloud]'``; Rust's
``object_store`` underneath), one maintained client for those stores. (``s3://`` goes through boto3:
:mod:`fastload.shards.stores.s3`.)

Credentials come the usual way for each cloud: the environment (``GOOGLE_*``,
``AZURE_*``), the clouds' config files and instance credentials, or ``options``
(obstore's configuration keys: ``service_account_path``, ``account_name``,
``account_key``, ``endpoint``, ...; ``client_options`` and ``retry_config`` as obstore
takes them). An ``http://`` endpoint is allowed when it is the one given.

obstore is not safe across ``fork``, and DataLoader workers are forked: each process
asks store processes of its own (:mod:`~fastload.shards.stores.obstore_process`, up to
``parallel`` of them, started as requests need them, a shard's download each at a
time), which run the requests: the ranged GETs of a shard in parallel, written straight
into the cache. obstore retries throttling, 5xx answers, dropped connections and timeouts of
reads, with exponential backoff and jitter; a request stalled for 10 s is given up and
retried; a body cut short on the way is read again. The node's cache of a shard set
there is :class:`~fastload.shards.stores.cached.CachedShards`'.

Example::

    bucket = ObstoreBucket("gs://my-bucket/train", options={"service_account_path": "key.json"})
    index = bucket.read("index.json")
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastload._checks import check_int
from fastload.shards.format.index import INDEX, ShardIndexError
from fastload.shards.stores import obstore_process
from fastload.shards.stores.bucket import TablePart

__all__ = ["SCHEMES", "ObstoreBucket", "store_options"]

#: URL schemes reached through obstore by default; the web ones are read-only.
SCHEMES = ("gs", "az", "https", "http")
#: What it reaches when asked: S3 too (the benchmarks compare it with boto3 there).
_REACHES = (*SCHEMES, "s3")
CHUNK = 8 << 20  # bytes per ranged GET
#: Where a cloud's endpoint may be set in the environment.
_ENDPOINT_VARIABLES = {"az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")}
_setup = threading.Lock()  # a process's helper is started once


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


def store_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as obstore's ``from_url`` takes them, in JSON (durations in seconds):
    an ``http://`` endpoint allowed, the timeouts and retries set unless given.

    Example:
        >>> store_options("az://c/set", {"endpoint": "http://127.0.0.1:10000/acct"})[
        ...     "client_options"]["allow_http"]
        True
    """
    given = dict(options)
    client = {key: value.total_seconds() if isinstance(value, timedelta) else value
              for key, value in given.pop("client_options", {}).items()}  # fmt: skip
    scheme = urlparse(url).scheme
    variables = _ENDPOINT_VARIABLES.get(scheme, ())
    endpoint = str(given.get("endpoint") or next(
        (os.environ[v] for v in variables if os.environ.get(v)), ""))  # fmt: skip
    if endpoint.startswith("http://") or scheme == "http":
        client.setdefault("allow_http", True)  # the endpoint asked for, not a downgrade
    client.setdefault("connect_timeout", 5)
    client.setdefault("timeout", 10)  # a stalled request is given up and retried
    retry = {"max_retries": 10, "retry_timeout": 180,
             "backoff": {"init_backoff": 0.1, "max_backoff": 15, "base": 2}}  # fmt: skip
    return {**given, "client_options": client, "retry_config": given.pop("retry_config", retry)}


class StoreError(Exception):
    """An error the store process answered with: ``kind`` (missing, refused, cut,
    other) and its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class StoreProcess:
    """This process's helper for one store (see :mod:`~fastload.shards.stores.obstore_process`):
    requests one at a time, in order."""

    def __init__(self, url: str, options: dict[str, Any], parallel: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", obstore_process.__file__],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        self._lock = threading.Lock()
        self.ask({"op": "open", "url": url, "options": store_options(url, options),
                  "parallel": parallel})  # fmt: skip

    def ask(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """Its answer to one request; an error it answered with as a :class:`StoreError`."""
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            try:
                obstore_process.send(self._process.stdin, header, payload)
                answer = obstore_process.receive(self._process.stdout)
            except (BrokenPipeError, ValueError):
                answer = None
            if answer is None:
                raise StoreError("other", "the store process ended")
        reply, data = answer
        if not reply["ok"]:
            raise StoreError(reply["kind"], reply["message"])
        return reply, data

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()  # it ends at the end of its requests
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class StoreProcesses:
    """This process's store processes for one store: up to ``most`` of them, each
    answering one request at a time, so that ``most`` requests (a shard's download each)
    run at once; a request goes to an idle one, or to one started for it."""

    def __init__(self, url: str, options: dict[str, Any], parallel: int, most: int) -> None:
        self.url, self.options, self.parallel, self.most = url, options, parallel, most
        self._idle: list[StoreProcess] = []
        self._started = 0
        self._condition = threading.Condition()

    def ask(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """The answer of one of them (see :meth:`StoreProcess.ask`)."""
        helper = self._take()
        try:
            return helper.ask(header, payload)
        finally:
            with self._condition:
                if helper.alive:
                    self._idle.append(helper)
                else:  # one that ended is replaced by the next request that needs one
                    self._started -= 1
                self._condition.notify()

    def _take(self) -> StoreProcess:
        with self._condition:
            while not self._idle and self._started >= self.most:
                self._condition.wait()
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:  # started outside the lock: the others' requests go on meanwhile
            return StoreProcess(self.url, self.options, self.parallel)
        except BaseException:
            with self._condition:
                self._started -= 1
                self._condition.notify()
            raise

    def counts(self) -> dict[str, int]:
        """The hedged reads of the idle ones, added up (:mod:`~fastload.shards.stores.hedging`)."""
        with self._condition:
            idle = list(self._idle)
        totals: dict[str, int] = {}
        for helper in idle:
            for key, value in helper.ask({"op": "counts"})[0]["counts"].items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def close(self) -> None:
        with self._condition:
            idle, self._idle = self._idle, []
        for helper in idle:
            helper.close()


def _close_in(helper: StoreProcesses, pid: int) -> None:
    """Close ``helper`` if this is its process ``pid`` (a forked child leaves its
    parent's processes alone)."""
    if os.getpid() == pid:
        helper.close()


class ObstoreBucket:
    """The objects under ``url`` (``gs://``, ``az://``, ``https://``; ``s3://`` when
    asked), through obstore in store processes of this process's own: ``options`` are
    obstore's configuration keys; up to ``parallel`` processes, each making ``parallel``
    ranged GETs of a download at once."""

    def __init__(
        self, url: str, *, options: dict[str, Any] | None = None, parallel: int = 4
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in _REACHES or not parsed.netloc:
            schemes = ", ".join(f"{scheme}://" for scheme in _REACHES)
            raise ValueError(f"{url}: not a URL of a store reached through obstore ({schemes})")
        self.url = url.rstrip("/")
        self.writable = parsed.scheme not in ("https", "http")
        #: obstore's configuration keys (see the module).
        self.options = dict(options or {})
        self.parallel = check_int(parallel, "parallel", low=1)
        self.hedging = True
        self._helper: StoreProcesses | None = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # a helper answers its own process: a spawned worker starts its own
        return {**self.__dict__, "_helper": None, "_pid": -1}

    @property
    def chunk(self) -> int:
        return CHUNK  # read at each download: a test may make the requests small

    @property
    def hedge_counts(self) -> dict[str, int]:
        if self._helper is None or self._pid != os.getpid():
            return {}
        return self._helper.counts()

    def helper(self) -> StoreProcesses:
        """This process's store processes (a forked worker starts its own)."""
        with _setup:
            if self._pid != os.getpid():
                try:
                    import obstore  # noqa: F401
                except ModuleNotFoundError as error:
                    raise ModuleNotFoundError(
                        f"{self.url}: shards in object storage need obstore: pip install '.[cloud]'"
                    ) from error
                self._helper = StoreProcesses(self.url, self.options, self.parallel,
                                              most=self.parallel)  # fmt: skip
                self._pid = os.getpid()
                # closed when this bucket goes, or at exit before the modules are torn
                # down: a __del__ then may find the globals it closes them with cleared
                weakref.finalize(self, _close_in, self._helper, self._pid)
        assert self._helper is not None
        return self._helper

    def _ask(
        self, header: dict[str, Any], where: str, payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        try:
            return self.helper().ask(header, payload)
        except StoreError as error:
            raise self.explained(error, where) from None

    # --- reading -------------------------------------------------------------------------

    def read(self, name: str) -> bytes:
        return self._ask({"op": "read", "name": name}, f"{self.url}/{name}")[1]

    def listing(self) -> dict[str, int]:
        return dict(self._ask({"op": "listing"}, self.url)[0]["objects"])

    def download(
        self, name: str, part: Path, spans: list[tuple[int, int]], table: TablePart | None
    ) -> tuple[str, str | None]:
        """A store process writes the spans into ``part``, and the table into its file
        (one request for both)."""
        header = {"op": "download", "name": name, "spans": spans, "path": str(part),
                  "hedging": self.hedging}  # fmt: skip
        if table is not None:
            header["table"] = [table[0], str(table[1])]
        reply, _ = self._ask(header, f"{self.url}/{name}")
        return str(reply["sha256"]), reply.get("table_sha256")

    def explained(self, error: Exception, where: str) -> Exception:
        """The store's error as one a user can act on, naming ``where``."""
        kind = error.kind if isinstance(error, StoreError) else "other"
        if kind == "missing" and where.endswith(f"/{INDEX}"):
            return ShardIndexError(
                f"{where}: no {INDEX}: not a fastload shard set, or its conversion did not finish"
            )
        if kind == "missing":
            return FileNotFoundError(f"{where}: no such object (or no such bucket)")
        if kind == "refused":
            return PermissionError(
                f"{where}: the store refused the credentials: check the cloud's variables "
                f"(GOOGLE_*, AZURE_*) or the storage options given ({error})"
            )
        return OSError(f"{where}: {error}")

    # --- writing -------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        return self.version(name) is not None

    def version(self, name: str) -> tuple[str, str] | None:
        """The object's ETag and last modification time (ISO 8601), None if absent."""
        reply, _ = self._ask({"op": "head", "name": name}, f"{self.url}/{name}")
        return None if reply["version"] is None else tuple(reply["version"])

    def names(self, prefix: str) -> list[str]:
        """The objects whose names start with ``prefix``, under the set's prefix."""
        return list(
            self._ask({"op": "names", "prefix": prefix}, f"{self.url}/{prefix}*")[0]["names"]
        )

    def write(self, name: str, data: bytes | Path) -> None:
        """Put ``data`` (bytes, or a file's) as the object ``name``: whole or not at all."""
        self._writable(name)
        # Google's XML API takes an object up to 5 TiB in one request; Azure's takes a
        # large file in blocks
        multipart = None if urlparse(self.url).scheme != "gs" else False
        header: dict[str, Any] = {"op": "write", "name": name, "multipart": multipart}
        if isinstance(data, Path):
            self._ask({**header, "path": str(data)}, f"{self.url}/{name}")
        else:
            self._ask(header, f"{self.url}/{name}", data)

    def delete(self, name: str) -> None:
        self._writable(name)
        self._ask({"op": "delete", "name": name}, f"{self.url}/{name}")

    def _writable(self, name: str) -> None:
        if not self.writable:
            raise PermissionError(f"{self.url}/{name}: a web server's shards are read-only")
