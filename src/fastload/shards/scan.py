"""Indexing a shard set that has no index: public WebDataset shards (``*.tar`` whose
members are grouped by key, ``dir/000123.jpg`` with ``dir/000123.cls``), scanned once and
the index written beside them, so the next open reads it directly."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

from fastload.shards.index import Member, ShardIndexError, file_sha256, shard_entry, write_index

__all__ = ["index_webdataset"]


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
    """Scan every ``*.tar`` of ``folder`` (sorted by name) and write its index.

    Raises:
        ShardIndexError: No tar files, one that is not a readable tar, or one with a
            sample spread over non-adjacent members.
    """
    tars = sorted(path for path in folder.glob("*.tar"))
    if not tars:
        raise ShardIndexError(f"{folder}: no index.json and no *.tar shards to index")
    return write_scanned_index(folder, [scan_tar(path) for path in tars], str(folder))


def write_scanned_index(folder: Path, shards: list[dict[str, Any]], where: str) -> Path:
    """The index of scanned shards, written into ``folder``."""
    samples = sum(len(shard["samples"]) for shard in shards)
    meta = {"source": f"WebDataset shards scanned in {where}", "samples": samples,
            "classes": None, "fields": None}  # fmt: skip
    return write_index(folder, shards, meta)


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
