"""Opening a fastload LMDB file for reading or writing, with errors that say what is wrong."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import lmdb
from fastload.lmdb.format import META_KEY, PROGRESS_KEY, RecordFormatError, decode_meta

__all__ = [
    "close_reader",
    "lock_path",
    "open_for_reading",
    "open_for_writing",
    "read_meta",
    "read_transaction",
]

# This process's read transaction per database file. LMDB forbids opening one file twice
# in a process, and an environment opened before fork must not be used in the child.
_readers: dict[str, tuple[lmdb.Environment, lmdb.Transaction]] = {}
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
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such fastload database")
    subdir = path.is_dir()
    if subdir and not (path / "data.mdb").exists():
        raise RecordFormatError(
            f"{path}: a directory without data.mdb, not a fastload database "
            "(fastload writes one file, e.g. train.lmdb)"
        )
    try:
        return lmdb.open(
            str(path), subdir=subdir, readonly=True, lock=False, readahead=readahead, meminit=False
        )
    except lmdb.InvalidError as error:
        raise RecordFormatError(f"{path}: not an LMDB file, not a fastload database") from error


@functools.lru_cache(maxsize=256)
def _resolve(path: str) -> str:
    return os.path.realpath(path)  # a dozen microseconds: once per path, not per read


def read_transaction(path: str | Path, *, readahead: bool = True) -> lmdb.Transaction:
    """This process's long-lived read transaction on ``path``, opened on first use.

    Every LMDBDataset on the same file in a process shares it (the first one's
    ``readahead`` wins). Values it returns are views into the memory map.
    """
    global _readers_pid
    if _readers_pid != os.getpid():
        # Handles inherited through fork: close them here (without a lock file that only
        # unmaps the child's view), else py-lmdb still counts the file as open.
        for env, txn in _readers.values():
            txn.abort()
            env.close()
        _readers.clear()
        _readers_pid = os.getpid()
    key = _resolve(os.fspath(path))
    entry = _readers.get(key)
    if entry is None:
        env = open_for_reading(path, readahead=readahead)
        entry = _readers[key] = (env, env.begin(buffers=True))
    return entry[1]


def close_reader(path: str | Path) -> None:
    """Close this process's read transaction on ``path``, if any (before writing to it)."""
    entry = _readers.pop(_resolve(os.fspath(path)), None) if _readers_pid == os.getpid() else None
    if entry is not None:
        entry[1].abort()
        entry[0].close()


def open_for_writing(path: Path, *, map_size: int) -> lmdb.Environment:
    # One file, not LMDB's directory layout: easy to copy, and `path` is the dataset.
    return lmdb.open(str(path), subdir=False, map_size=map_size, readahead=False, meminit=False)


def read_meta(txn: lmdb.Transaction, path: str | Path) -> dict[str, Any]:
    """The metadata of a complete database, or a clear error for anything else."""
    value = txn.get(META_KEY)
    if value is None:
        if txn.get(PROGRESS_KEY) is not None:
            raise RecordFormatError(
                f"{path}: incomplete database, a conversion stopped part-way; "
                "run the same `fastload convert` again with --resume to finish it"
            )
        raise RecordFormatError(f"{path}: no fastload metadata record, not a fastload database")
    return decode_meta(value, what=str(path))
