"""Opening a fastload LMDB file for reading or writing, with errors that say what is wrong."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import lmdb
from fastload.records.format import (
    META_KEY,
    PROGRESS_KEY,
    RESUME,
    RecordFormatError,
    decode_meta,
)

__all__ = [
    "close_reader",
    "file_identity",
    "is_lmdb_file",
    "lock_path",
    "open_for_reading",
    "open_for_writing",
    "read_meta",
    "read_transaction",
    "record_entries",
]

# This process's read transaction per database file. LMDB forbids opening one file twice
# in a process, and an environment opened before fork must not be used in the child.
_readers: dict[str, tuple[lmdb.Environment, lmdb.Transaction, tuple[int, int, int]]] = {}
_readers_pid: int | None = None


def lock_path(path: Path) -> Path:
    """LMDB's lock file beside a single-file database; only writers need it."""
    return path.with_name(path.name + "-lock")


def open_for_reading(path: str | Path, *, readahead: bool = True) -> lmdb.Environment:
    """Open read-only without the lock file: no reader slots (no ``ReadersFullError``), no
    writes to the directory (read-only filesystems work). Safe because a finished
    database never changes.

    ``readahead`` lets the OS read ahead on page faults: a multi-page image record then
    comes in one read instead of one per 4 KiB page.

    Raises:
        FileNotFoundError: No such path.
        RecordFormatError: Not a regular file (a FIFO would block forever), empty, not
            LMDB, or shorter than its last page (a partial copy: reading it would crash
            the process with SIGBUS).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such fastload database")
    subdir = path.is_dir()
    data = path / "data.mdb" if subdir else path
    if subdir and not data.exists():
        raise RecordFormatError(
            f"{path}: a directory without data.mdb, not a fastload database "
            "(fastload writes one file, e.g. train.lmdb)"
        )
    if not data.is_file():
        raise RecordFormatError(f"{data}: not a regular file, not a fastload database")
    size = data.stat().st_size
    if size == 0:
        raise RecordFormatError(f"{data}: empty file, not a fastload database")
    try:
        env = lmdb.open(
            str(path), subdir=subdir, readonly=True, lock=False, readahead=readahead, meminit=False
        )
    except lmdb.InvalidError as error:
        raise RecordFormatError(f"{path}: not an LMDB file, not a fastload database") from error
    except lmdb.Error as error:
        raise RecordFormatError(f"{path}: cannot open as LMDB: {error}") from error
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if size < needed:
        env.close()
        raise RecordFormatError(
            f"{data}: truncated, {size:,} bytes where the database needs {needed:,} "
            "(a partial copy?); copy it again"
        )
    return env


def file_identity(path: str | Path) -> tuple[int, int, int]:
    """What tells one file at ``path`` from another written there later."""
    info = os.stat(path)
    return info.st_dev, info.st_ino, info.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _resolve(path: str) -> str:
    return os.path.realpath(path)  # a dozen microseconds: once per path, not per read


def read_transaction(
    path: str | Path, *, readahead: bool = True, fresh: bool = False
) -> lmdb.Transaction:
    """This process's long-lived read transaction on ``path``, opened on first use.

    Every LMDBDataset on the same file in a process shares it (the first one's
    ``readahead`` wins). Values it returns are views into the memory map. ``fresh``
    first checks that the file at ``path`` is still the one that was opened: a
    database deleted and written again at the same path is opened anew.
    """
    global _readers_pid
    if _readers_pid != os.getpid():
        # Handles inherited through fork: close them here (without a lock file that only
        # unmaps the child's view), else py-lmdb still counts the file as open.
        for env, txn, _ in _readers.values():
            txn.abort()
            env.close()
        _readers.clear()
        _readers_pid = os.getpid()
    key = _resolve(os.fspath(path))
    entry = _readers.get(key)
    if entry is not None and fresh and entry[2] != file_identity(path):
        close_reader(path)
        entry = None
    if entry is None:
        identity = file_identity(path) if os.path.exists(path) else (0, 0, 0)
        env = open_for_reading(path, readahead=readahead)
        entry = _readers[key] = (env, env.begin(buffers=True), identity)
    return entry[1]


def record_entries(path: str | Path) -> int:
    """Keys in the database at ``path`` (records and bookkeeping), from its B-tree header."""
    read_transaction(path)
    return _readers[_resolve(os.fspath(path))][0].stat()["entries"]


def close_reader(path: str | Path) -> None:
    """Close this process's read transaction on ``path``, if any (before writing to it)."""
    entry = _readers.pop(_resolve(os.fspath(path)), None) if _readers_pid == os.getpid() else None
    if entry is not None:
        env, txn, _ = entry
        txn.abort()
        env.close()


_LMDB_MAGIC = b"\xde\xc0\xef\xbe"  # MDB_MAGIC, little-endian, after the first page's header


def is_lmdb_file(path: Path) -> bool:
    """Whether the regular file ``path`` starts as an LMDB data file does."""
    try:
        with open(path, "rb") as file:
            return file.read(20)[16:] == _LMDB_MAGIC
    except OSError:
        return False


def open_for_writing(path: Path, *, map_size: int) -> lmdb.Environment:
    """Create or reopen ``path``; an OSError that says why when it cannot be written.
    Anything at ``path`` that is not an LMDB file is refused untouched."""
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path.parent}: no such directory to write {path.name} in")
    if path.exists() and not (path.is_file() and is_lmdb_file(path)):
        raise RecordFormatError(
            f"{path}: exists and is not an LMDB file, not a fastload database; it is left as "
            "it is: give another destination"
        )
    existed = lock_path(path).exists()
    try:
        # One file, not LMDB's directory layout: easy to copy, and `path` is the dataset.
        return lmdb.open(str(path), subdir=False, map_size=map_size, readahead=False, meminit=False)
    except lmdb.Error as error:  # a read-only filesystem, no permission, a damaged file
        if not existed:
            lock_path(path).unlink(missing_ok=True)
        if isinstance(error, lmdb.InvalidError):
            raise RecordFormatError(f"{path}: not an LMDB file, not a fastload database") from error
        raise OSError(f"{path}: cannot write the database: {error}") from error


def read_meta(txn: lmdb.Transaction, path: str | Path) -> dict[str, Any]:
    """The metadata of a complete database, or a clear error for anything else."""
    value = txn.get(META_KEY)
    if value is None:
        if txn.get(PROGRESS_KEY) is not None:
            raise RecordFormatError(
                f"{path}: incomplete database, a conversion stopped part-way; "
                f"run the same conversion again with {RESUME} to finish it"
            )
        raise RecordFormatError(f"{path}: no fastload metadata record, not a fastload database")
    return decode_meta(value, what=str(path))
