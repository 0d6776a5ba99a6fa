"""Opening a fastload LMDB file for reading or writing, with errors that say what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
from fastload.lmdb.format import META_KEY, PROGRESS_KEY, RecordFormatError, decode_meta

__all__ = ["lock_path", "open_for_reading", "open_for_writing", "read_meta"]


def lock_path(path: Path) -> Path:
    """LMDB's lock file beside a single-file database; only writers need it."""
    return path.with_name(path.name + "-lock")


def open_for_reading(path: str | Path, *, readahead: bool = False) -> lmdb.Environment:
    """Open read-only without the lock file: no reader slots (no ``ReadersFullError``), no
    writes to the directory (read-only filesystems work). Safe because a finished
    database never changes.

    ``readahead=False`` suits random reads from a local disk; ``True`` suits network
    filesystems and sequential scans.
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


def open_for_writing(path: Path, *, map_size: int) -> lmdb.Environment:
    # One file, not LMDB's directory layout: easy to copy, and `path` is the dataset.
    return lmdb.open(str(path), subdir=False, map_size=map_size, readahead=False, meminit=False)


def read_meta(env: lmdb.Environment, path: str | Path) -> dict[str, Any]:
    """The metadata of a complete database, or a clear error for anything else."""
    with env.begin() as txn:
        value = txn.get(META_KEY)
        if value is None:
            if txn.get(PROGRESS_KEY) is not None:
                raise RecordFormatError(
                    f"{path}: incomplete database, a conversion stopped part-way; "
                    "run the same `fastload convert` again with --resume to finish it"
                )
            raise RecordFormatError(f"{path}: no fastload metadata record, not a fastload database")
    return decode_meta(value, what=str(path))
