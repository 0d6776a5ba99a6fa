"""The index layouts on disk. A new shard set (version 4): each shard's member table at
its end, after the tar (:func:`append_table`, as the shard is written), then
``index.json`` with per-shard facts only (:func:`write_index`). Tars that are not to be
changed (an upgraded older set, a scan of public tars; version 3): each table a file
beside its shard (:func:`write_index_with_tables_beside`). A table read back and checked
against its index entry (:func:`checked_table`); an index of version 1 or 2 (members
inline) converted in place (:func:`upgrade_index`, ``fastload index --upgrade``).

Example:
    >>> import tarfile, tempfile
    >>> from pathlib import Path
    >>> from fastload.shards import write_shards
    >>> from fastload.testing.shapes import ShapesDetection
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = write_shards(ShapesDetection(3, size=(32, 32)), folder)
    >>> sorted(path.name for path in folder.iterdir())
    ['index.json', 'shard-000000.tar']
    >>> len(tarfile.open(folder / "shard-000000.tar").getnames())  # the table is no member
    6
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fastload._atomic import write_whole
from fastload.shards.format.index import (
    BESIDE,
    INDEX,
    INLINE,
    VERSION,
    Member,
    Shard,
    ShardIndexError,
    clear_temporaries,
    index_bytes,
    load_index,
    parse_index,
    refuse_unfinished,
    table_name,
)
from fastload.shards.format.table import MemberTable, read_table, table_bytes

__all__ = [
    "append_table",
    "checked_table",
    "load_table",
    "table_at_end",
    "table_place",
    "upgrade_index",
    "write_index",
    "write_index_with_tables_beside",
]


def append_table(path: Path, samples: list[tuple[str, dict[str, Member]]]) -> None:
    """End the complete tar ``path`` with the member table of its ``samples``: after the
    tar's end-of-archive blocks, where every tar reader has stopped."""
    with open(path, "ab") as file:
        file.write(table_bytes(samples))


def write_index(folder: Path, shards: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write ``folder``'s index in version 4 from ``shards``' entries with members inline
    (as :func:`~fastload.shards.format.index.shard_entry` makes them) of shards that end with
    their member tables (:func:`append_table`), checked as loading checks it.

    Raises:
        ShardIndexError: Entries that would not load.
    """
    path = folder / INDEX
    inline, _ = parse_index(index_bytes(shards, meta, INLINE), str(path))  # refusal: no write
    entries = [_tabled_entry(shard, _table_of(shard)) for shard in inline]
    content = index_bytes(entries, meta, VERSION)
    parse_index(content, str(path))
    write_whole(path, content)
    return path


def _tabled_entry(shard: Shard, table: bytes) -> dict[str, Any]:
    return {
        "name": shard.name, "size": shard.size, "sha256": shard.sha256,
        "count": shard.count, "extensions": list(shard.extensions),
        "table_size": len(table), "table_sha256": hashlib.sha256(table).hexdigest(),
    }  # fmt: skip


def write_index_with_tables_beside(
    folder: Path, shards: list[dict[str, Any]], meta: dict[str, Any]
) -> Path:
    """Write ``folder``'s index in version 3 from ``shards``' entries with members inline,
    the tars left as they are: every member table first, a file beside its shard, each
    whole or not at all, then ``index.json``, checked as loading checks it, last.

    A table file that is already there is left as it is when it holds these bytes (a
    commit run again) and refused otherwise: a file this writer did not make is never
    replaced.

    Raises:
        ShardIndexError: Entries that would not load, or a folder holding a conversion
            that stopped part-way (:func:`~fastload.shards.format.index.refuse_unfinished`).
        FileExistsError: A file under a table's name with other bytes.
    """
    refuse_unfinished(folder)
    path = folder / INDEX
    inline, _ = parse_index(index_bytes(shards, meta, INLINE), str(path))  # refusal: no write
    tables = [(folder / table_name(shard.name), _table_of(shard)) for shard in inline]
    for file, data in tables:  # all refused before any is written
        if file.exists() and (not file.is_file() or file.read_bytes() != data):
            raise FileExistsError(
                f"{file} exists and is not this shard's member table; it is left as it is"
            )
    entries = []
    for shard, (file, data) in zip(inline, tables, strict=True):
        if not file.exists():
            write_whole(file, data)
        entries.append(_tabled_entry(shard, data))
    content = index_bytes(entries, meta, BESIDE)
    parse_index(content, str(path))
    write_whole(path, content)
    return path


def _table_of(shard: Shard) -> bytes:
    assert shard.samples is not None  # parsed from an inline index
    return table_bytes(shard.samples)


def checked_table(data: bytes, where: str, shard: Shard) -> MemberTable:
    """The member table ``data`` of ``shard`` (named ``where`` in errors), checked: its
    size and SHA-256 those of the index, its samples and members consistent with the
    shard (:func:`~fastload.shards.format.table.read_table`), its extensions the index's.

    Raises:
        ShardIndexError: Any of those that does not hold, naming ``where``.
    """
    if len(data) != shard.table_size or hashlib.sha256(data).hexdigest() != shard.table_sha256:
        raise ShardIndexError(
            f"{where}: its SHA-256 differs from the index's: the member table was changed "
            "or damaged after it was written"
        )
    # a table inside its shard: the members are in the tar before it
    tar_size = shard.size - shard.table_size if shard.table_inside else shard.size
    table = read_table(data, where, shard_size=tar_size, count=shard.count)
    if tuple(table.extensions) != shard.extensions:
        raise ShardIndexError(
            f"{where}: extensions {table.extensions}, the index says {list(shard.extensions)}"
        )
    return table


def load_table(folder: Path, shard: Shard) -> MemberTable:
    """``shard``'s members: inline (versions 1 and 2) or its table beside it in ``folder``
    (version 3), checked (one inside its shard, version 4, is read through the shard's
    descriptor: :func:`table_at_end`).

    Raises:
        ShardIndexError: A table that is missing or fails :func:`checked_table`.
    """
    if shard.samples is not None:
        return MemberTable.of(shard.samples)
    where = table_place(str(folder), shard)
    try:
        data = (folder / table_name(shard.name)).read_bytes()
    except FileNotFoundError:
        raise ShardIndexError(f"{where}: the member table of {shard.name} is missing") from None
    except IsADirectoryError:
        raise ShardIndexError(
            f"{where}: the member table of {shard.name} is a folder, not a file"
        ) from None
    return checked_table(data, where, shard)


def table_place(where: str, shard: Shard) -> str:
    """Where ``shard``'s member table is, under the folder or URL ``where``, as errors
    name it: inside the shard, or the file beside it.

    Example:
        >>> from fastload.shards.format.index import Shard
        >>> table_place("s3://b/set", Shard("a.tar", 10, "", table_inside=True))
        's3://b/set/a.tar (its member table)'
    """
    if shard.table_inside:
        return f"{where}/{shard.name} (its member table)"
    return f"{where}/{table_name(shard.name)}"


def table_at_end(descriptor: int, shard: Shard, where: str) -> bytes:
    """The member table inside ``shard``, unchecked: the last ``table_size`` bytes of
    the file open on ``descriptor`` (``where`` names it in errors).

    Raises:
        ShardIndexError: A file shorter than the index says.
    """
    data = os.pread(descriptor, shard.table_size, shard.size - shard.table_size)
    if len(data) != shard.table_size:
        raise ShardIndexError(f"{where}: cut short: {shard.name} is shorter than the index says")
    return data


def upgrade_index(folder: Path) -> tuple[Path, int]:
    """Convert ``folder``'s index of version 1 or 2 to version 3 in place: the member
    tables written beside the shards, then ``index.json`` replaced whole. The new index
    keeps the old shard list's digest as ``upgraded_from``, so a ``ShardShuffle`` state
    saved on the old index is still accepted. Returns the index and its shard count.
    What an upgrade killed before left (its temporary files) is removed first.

    Raises:
        ShardIndexError: No index, or one that does not load.
        ValueError: An index of version 3 or 4 already.
        FileExistsError: A file under a table's name with other bytes.
    """
    clear_temporaries(folder)
    shards, meta = load_index(folder)  # checked whole, each shard present and of its size
    if meta["version"] >= BESIDE:
        raise ValueError(f"{folder / INDEX} is of version {meta['version']}: nothing to upgrade")
    raw = json.loads((folder / INDEX).read_bytes())
    kept = {key: value for key, value in raw.items()
            if key not in ("format", "version", "shards", "shards_sha256")}  # fmt: skip
    kept["upgraded_from"] = meta["shards_sha256"]
    return write_index_with_tables_beside(folder, raw["shards"], kept), len(shards)
