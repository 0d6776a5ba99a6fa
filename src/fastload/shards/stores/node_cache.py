"""A node's shard cache: a folder of its own per source and index, shared by the processes
of the node. It owns that folder and nothing else: it evicts and overwrites only shards of
its index that it downloaded (their hash recorded beside them, after them), never a file
it did not write. A lock per shard (a thread lock, and a POSIX record lock on a file
across processes) lets one process download a shard; each reader announces the shards it
reads next (its plan), and past ``limit`` bytes the shard no plan needs, or needs last,
goes first. A read-only cache is read as it is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastload._checks import check_int
from fastload.shards.format.index import INDEX, TABLE

__all__ = ["PLAN_STALE_S", "READ_ONLY", "NodeCache", "check_cache", "folder_name"]

_PLAN = ".plan-"  # + host + pid: the shards a process sharing the cache reads next
_PART = ".part"  # a download under way: ".NAME~HOST~PID~THREAD.part"
#: A plan of another host (or container) whose process cannot be asked whether it lives:
#: dropped once it has not been rewritten for this long (a reader rewrites its plan as it
#: moves through its windows).
PLAN_STALE_S = 600


def _host() -> str:
    """This host or container: its name and its PID namespace (containers sharing the
    host's network share its name, not their PIDs)."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"
    try:
        return f"{name}.{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:  # no /proc (not Linux)
        return name


_HOST = _host()


#: What writing into a read-only cache (a read-only mount, another user's folder) raises.
READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})

_setup = threading.Lock()  # a process's lock table is made once


def _fresh_setup_lock() -> None:
    global _setup
    _setup = threading.Lock()  # a fork copies a lock another thread may hold


os.register_at_fork(after_in_child=_fresh_setup_lock)


def folder_name(url: str) -> str:
    """A cache folder's name for ``url``: readable (its bucket and prefix, other characters
    as ``_``) and unique (a digest of the whole URL).

    Example:
        >>> folder_name("s3://my-bucket/train/v2")
        'my-bucket_train_v2-f4838f6d4e86d9e0'
    """
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", url.split("://", 1)[-1].strip("/"))[:80]
    return f"{readable}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _owner_alive(path: Path, host: str, pid: str) -> bool:
    """Whether the process that writes ``path`` (``pid`` on ``host``) may still: one of
    this host that lives, or a file of another host (or of no owner named) written to
    within :data:`PLAN_STALE_S`."""
    if host == _HOST and pid.isdigit():
        return _alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime < PLAN_STALE_S
    except FileNotFoundError:
        return False


def _plan_alive(path: Path) -> bool:
    host, _, pid = path.stem.removeprefix(_PLAN).rpartition("-")
    return _owner_alive(path, host, pid)


def _part_alive(path: Path) -> bool:
    """Whether the downloader of the part ``path`` (see :meth:`NodeCache.part`) may
    still write it."""
    owner = path.name.removesuffix(_PART).rsplit("~", 3)
    return _owner_alive(path, *owner[1:3]) if len(owner) == 4 else _owner_alive(path, "", "")


def check_cache(cache_dir: str | os.PathLike[str] | None, cache_limit: int | None) -> None:
    """Refuse a ``cache_limit`` that is not a positive int of bytes, and a ``cache_dir``
    that is (or lies under) a file, naming the argument.

    Raises:
        ValueError: ``cache_limit`` below 1 byte, or not an int.
        NotADirectoryError: ``cache_dir``, or a folder it would be made in, is a file.
    """
    if cache_limit is not None:
        check_int(cache_limit, "cache_limit", low=1)
    if cache_dir is not None:
        path = Path(cache_dir)
        existing = next(folder for folder in [path, *path.parents] if folder.exists())
        if not existing.is_dir():
            raise NotADirectoryError(
                f"cache_dir {str(cache_dir)!r}: {existing} is a file, not a folder"
            )


class NodeCache:
    """The cache of one source (``url``) under ``root``: its index's folder (``folder``,
    set by :meth:`use_index`), its locks, plans and eviction past ``limit`` bytes."""

    def __init__(self, root: Path, url: str, limit: int | None) -> None:
        check_cache(root, limit)
        #: The source's own folder (made by the cache): its index namespaces, and the
        #: lock of a scan; readable, and unique to the URL.
        self.source = root / "fastload-shards" / folder_name(url)
        #: The current index's namespace, where its shards are cached.
        self.folder = self.source / "index-unknown"
        self.limit = limit
        self.names: frozenset[str] = frozenset()  # the shards of that index
        self.read_only = False  # found so when a lock file could not be made
        self._locks: dict[str, threading.Lock] = {}
        self._locks_pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_locks": {}, "_locks_pid": -1}  # locks stay in their process

    def use_index(self, digest: str | None, names: frozenset[str]) -> None:
        """Cache the shards ``names`` of the index of ``digest`` (None: a scanned one);
        the parts its dead downloaders left go."""
        self.folder = self.source / ("scanned" if digest is None else f"index-{digest[:16]}")
        self.names = names
        if not self.read_only:
            for entry in self.folder.glob(f".*{_PART}"):
                self._drop_if_dead(entry)

    def part(self, name: str) -> Path:
        """Where this thread downloads ``name`` before it enters the cache: a file of its
        own (its host, process and thread in the name), so that two downloaders never
        write one file, even where the lock between them is gone (a cache emptied under a
        running pass)."""
        owner = f"{_HOST}~{os.getpid()}~{threading.get_native_id()}"
        return self.folder / f".{name}~{owner}{_PART}"

    @property
    def scanned(self) -> bool:
        """Whether the namespace is a scan's, its index and member tables written here."""
        return self.folder.name == "scanned"

    def enter(self, part: Path, name: str, digest: str) -> Path:
        """The downloaded and checked ``part`` becomes shard ``name``, its hash recorded
        last: a shard is trusted only by a record written after it (interrupted in
        between, neither the old nor the new one is trusted)."""
        path, record = self.folder / name, self.folder / f".{name}.sha256"
        record.unlink(missing_ok=True)
        os.replace(part, path)
        recorded = record.with_name(f"{record.name}.tmp")
        recorded.write_text(digest)
        os.replace(recorded, record)
        return path

    def used(self, path: Path) -> None:
        """Stamp ``path``'s last use, for the eviction (a read-only cache keeps none)."""
        with contextlib.suppress(OSError):
            os.utime(path)

    @contextlib.contextmanager
    def locked(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        """The shard ``name`` held by this thread alone on the node: a thread lock in this
        process, and a POSIX record lock on its lock file across processes (a forked
        child does not inherit it, as it would an ``flock``, so a fork never keeps one
        held). Yields whether it was taken (always, when ``wait``)."""
        if self._locks_pid != os.getpid():
            self._locks, self._locks_pid = {}, os.getpid()
        with _setup:
            thread_lock = self._locks.setdefault(name, threading.Lock())
        if not thread_lock.acquire(blocking=wait):
            yield False
            return
        try:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                lock = open(self.folder / f".{name}.lock", "a")  # noqa: SIM115 (closed below)
            except OSError as error:
                if error.errno not in READ_ONLY:
                    raise
                self.read_only = True  # no process writes it: reading needs no lock
                yield True
                return
            with lock:
                try:
                    fcntl.lockf(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield False
                    return
                yield True  # closing the file lets the record lock go
        finally:
            thread_lock.release()

    def checked_hash(self, name: str) -> str | None:
        try:
            return (self.folder / f".{name}.sha256").read_text()
        except FileNotFoundError:
            return None

    def _plan_path(self) -> Path:
        """This process's plan: named by host (container) and PID, so that readers of
        one cache from several hosts or containers never share a name."""
        return self.folder / f"{_PLAN}{_HOST}-{os.getpid()}.json"

    def plan(self, upcoming: list[str]) -> None:
        """Announce the shards this process reads next, soonest first, to every process
        sharing the cache: its eviction keeps the ones needed soonest (a read-only
        cache evicts nothing: no plan)."""
        path = self._plan_path()
        temporary = path.with_suffix(".tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(upcoming))
        except OSError as error:
            if error.errno in READ_ONLY or error.errno == errno.ENOSPC:  # advice only
                return
            raise
        temporary.replace(path)

    def forget_plan(self) -> None:
        try:
            self._plan_path().unlink(missing_ok=True)
        except OSError as error:  # a read-only cache holds no plan of ours
            if error.errno not in READ_ONLY:
                raise

    def next_uses(self) -> dict[str, int]:
        """Shard name -> how soon a process sharing the cache reads it (0: now), from the
        plans of the processes still alive: on this host, asked by PID; on another, a
        plan rewritten in the last :data:`PLAN_STALE_S` seconds."""
        uses: dict[str, int] = {}
        for path in self.folder.glob(f"{_PLAN}*.json"):
            if not _plan_alive(path):
                with contextlib.suppress(OSError):  # (a read-only cache keeps it)
                    path.unlink(missing_ok=True)  # a killed reader's plan
                continue
            try:
                names = json.loads(path.read_text())
            except (OSError, ValueError):  # replaced while read: the next call sees it
                continue
            for position, name in enumerate(names):
                uses[name] = min(position, uses.get(name, position))
        return uses

    def make_room(self, incoming: int, use: int | None = None) -> bool:
        """Evict until ``incoming`` more bytes fit under ``limit``: first shards no
        plan reads again (least recently used first), then those read furthest ahead
        (Belady's rule). A shard read at ``use`` (a prefetch) evicts none needed sooner;
        returns False when it cannot fit without that. Downloads in flight count; a
        shard another thread or process holds (opening or fetching it) is not evicted."""
        if self.limit is None or self.read_only:
            return True
        uses = self.next_uses()
        cached, in_flight = [], 0
        for entry in self.folder.iterdir():
            try:
                stat = entry.stat()
            except FileNotFoundError:  # evicted or renamed by another process meanwhile
                continue
            if entry.name.endswith(_PART):
                if not self._drop_if_dead(entry):
                    in_flight += stat.st_size
            elif entry.is_file() and not entry.name.startswith(".") and entry.name != INDEX:
                cached.append((entry, stat))
        never = len(uses) + 1  # after any planned use

        def evicted_first(item: tuple[Path, os.stat_result]) -> tuple[int, float]:
            entry, stat = item
            return -uses.get(entry.name, never), stat.st_mtime

        total = incoming + in_flight + sum(stat.st_size for _, stat in cached)
        # evicted: only this index's shards that the cache downloaded (hash recorded)
        cached = [(entry, stat) for entry, stat in cached if self.owns(entry.name)]
        for entry, stat in sorted(cached, key=evicted_first):
            if total <= self.limit:
                break
            if use is not None and uses.get(entry.name, never) <= use:
                return False  # everything left is needed before the prefetched shard
            with self.locked(entry.name, wait=False) as taken:
                if taken:
                    (self.folder / f".{entry.name}.sha256").unlink(missing_ok=True)
                    entry.unlink(missing_ok=True)
                    total -= stat.st_size
        return True

    def _drop_if_dead(self, part: Path) -> bool:
        """Remove ``part`` where a dead downloader left it (nobody finishes it) and it is
        a download of this index's own files (a shard or its table): whether it went."""
        name = part.name.removesuffix(_PART).rsplit("~", 3)[0].removeprefix(".")
        mine = name in self.names or name.removesuffix(TABLE) in self.names
        if not mine or _part_alive(part):
            return False
        part.unlink(missing_ok=True)
        return True

    def owns(self, name: str) -> bool:
        """Whether ``name`` in the namespace is a shard of this index that the cache
        downloaded and checked itself (its hash recorded beside it)."""
        return name in self.names and (self.folder / f".{name}.sha256").is_file()
