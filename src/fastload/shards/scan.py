"""Indexing a shard set that has no index: public WebDataset shards (``*.tar`` whose
members are grouped by key, ``dir/000123.jpg`` with ``dir/000123.cls``). The index is
written beside them only when asked (``fastload index FOLDER``: :func:`index_webdataset`);
``ShardedDataset`` keeps a scan in its ``cache_dir`` when it has one, and otherwise scans
at each start, saying so (:func:`scanned_index`)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import warnings
from pathlib import Path
from typing import Any

from fastload.shards.index import (
    INDEX,
    INLINE,
    Member,
    Shard,
    ShardIndexError,
    file_sha256,
    index_bytes,
    index_of,
    shard_entry,
)
from fastload.shards.layout import write_index_with_tables_beside

__all__ = ["index_webdataset", "scanned_index"]

#: The folder of ``cache_dir`` where scans of local shard folders are kept.
SCANS = "fastload-scans"


def _split(name: str) -> tuple[str, str]:
    """WebDataset's rule: the key is the member's path up to the first dot of its last
    part, the extension what follows it (``a/b.seg.png``: ``a/b``, ``seg.png``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension if dot else ""


def _kind(info: tarfile.TarInfo) -> str:
    if info.issparse():
        return "a sparse file (its holes are not stored)"
    if info.issym() or info.islnk():
        return f"a link to {info.linkname!r}"
    return "a device or a FIFO" if info.isdev() else f"of tar type {info.type!r}"


def index_webdataset(folder: Path) -> Path:
    """Scan every ``*.tar`` of ``folder`` (sorted by name) and write its index beside
    them (``fastload index FOLDER``).

    Raises:
        ShardIndexError: No tar files, one that is not a readable tar, or one with a
            sample spread over non-adjacent members.
    """
    return write_scanned_index(folder, [scan_tar(path) for path in _tars(folder)], str(folder))


def scanned_index(
    folder: Path, cache_dir: str | os.PathLike[str] | None
) -> tuple[list[Shard], dict[str, Any], Path | None]:
    """The index of the WebDataset shards in ``folder``, which has none, with nothing
    written into ``folder``: a scan kept in ``cache_dir`` (for these tars: their names,
    sizes and times; version 3, its member tables in its own folder, the third value),
    or, without one, a scan now (members inline, in memory: no folder) and a warning
    that says how to keep it.
    """
    tars = _tars(folder)
    if cache_dir is None:
        data = _scanned_bytes(folder, tars)
        warnings.warn(
            f"{folder}: no {INDEX}: its {len(tars)} tar file(s) were read whole to index "
            f"them, as they will be at each start; `fastload index {folder}` writes the "
            "index beside them once, or give cache_dir= to keep the scan there",
            stacklevel=3,
        )
        return (*index_of(folder, data, f"the scan of {folder}"), None)
    kept = Path(cache_dir) / SCANS / _tars_digest(folder, tars)
    if not (kept / INDEX).is_file():  # written last: a scan cut short is made again
        kept.mkdir(parents=True, exist_ok=True)
        write_scanned_index(kept, [scan_tar(path) for path in tars], str(folder))
    return (*index_of(folder, (kept / INDEX).read_bytes(), str(kept / INDEX)), kept)


def write_scanned_index(folder: Path, shards: list[dict[str, Any]], where: str) -> Path:
    """The index of scanned shards, written into ``folder``: version 3, each member
    table a file beside it (the tars are not changed)."""
    return write_index_with_tables_beside(folder, shards, _scanned_meta(shards, where))


def _tars(folder: Path) -> list[Path]:
    tars = sorted(path for path in folder.glob("*.tar"))
    if not tars:
        raise ShardIndexError(f"{folder}: no {INDEX} and no *.tar shards to index")
    return tars


def _scanned_meta(shards: list[dict[str, Any]], where: str) -> dict[str, Any]:
    samples = sum(len(shard["samples"]) for shard in shards)
    return {"source": f"WebDataset shards scanned in {where}", "samples": samples,
            "classes": None, "fields": None}  # fmt: skip


def _scanned_bytes(folder: Path, tars: list[Path]) -> bytes:
    shards = [scan_tar(path) for path in tars]
    # kept in a cache (or not kept): members inline, no table files to keep beside it
    return index_bytes(shards, _scanned_meta(shards, str(folder)), INLINE)


def _tars_digest(folder: Path, tars: list[Path]) -> str:
    """What a kept scan is of: the folder and each tar's name, size and modification
    time (a tar rewritten in place is scanned again)."""
    listing = [str(folder.resolve())]
    for path in tars:
        status = path.stat()
        listing.append(f"{path.name}\0{status.st_size}\0{status.st_mtime_ns}")
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:32]


def scan_tar(path: Path) -> dict[str, Any]:
    """The index entry of one tar: its samples' members grouped by key, its SHA-256."""
    samples: list[tuple[str, dict[str, Member]]] = []
    seen: set[str] = set()
    try:
        with tarfile.open(path, "r:") as archive:
            for info in archive:
                if info.isdir():
                    continue
                if not info.isfile() or info.issparse():  # no bytes at an offset to read
                    raise ShardIndexError(
                        f"{path}: member {info.name!r} is {_kind(info)}: only regular files "
                        "are read from a shard"
                    )
                key, extension = _split(info.name)
                extension = extension.lower()
                if not extension.replace(".", "").isalnum():
                    continue  # no extension, or one a member name cannot be read by
                extension = extension.replace(".", "_")
                if not samples or samples[-1][0] != key:
                    if key in seen:
                        raise ShardIndexError(
                            f"{path}: the members of sample {key!r} are not adjacent"
                        )
                    seen.add(key)
                    samples.append((key, {}))
                samples[-1][1][extension] = Member(extension, info.offset_data, info.size)
    except (tarfile.TarError, EOFError) as error:
        raise ShardIndexError(f"{path}: not a readable tar ({error})") from None
    size = path.stat().st_size
    for key, members in samples:
        for member in members.values():
            if member.offset + member.size > size:
                raise ShardIndexError(f"{path}: member {key}.{member.extension} runs past the end")
    return shard_entry(path.name, size, file_sha256(path), samples)
