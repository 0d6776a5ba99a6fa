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

from fastload.shards.format.index import (
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
from fastload.shards.format.layout import write_index_with_tables_beside
from fastload.shards.format.members import GZIP, decoded_as, is_decoded, without_gzip
from fastload.shards.format.naming import member_name, split_member

__all__ = ["index_webdataset", "scanned_index"]

#: The folder of ``cache_dir`` where scans of local shard folders are kept.
SCANS = "fastload-scans"


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
    for path in tars:
        if not _is_utf8(path.name):
            raise ShardIndexError(
                f"{folder}: shard file name {_raw(path.name)!r} is not UTF-8 (Latin-1?): "
                "shard indexes name shards in UTF-8; rename it"
            )
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
    """The index entry of one tar: its samples' members grouped by key as WebDataset
    groups them (:mod:`fastload.shards.format.naming`), its SHA-256.

    Raises:
        ShardIndexError: A member that is not a regular file, whose name is not UTF-8 or
            has no name in the index, that would be decoded otherwise than WebDataset
            decodes it, or that shares its sample's name with another; a sample spread
            over non-adjacent members; a tar that cannot be read. Each names the tar and
            the member.
    """
    samples: list[tuple[str, dict[str, Member]]] = []
    names: dict[str, str] = {}  # the current sample's members: index name -> tar name
    seen: set[str] = set()
    try:
        with tarfile.open(path, "r:", encoding="utf-8") as archive:
            for info in archive:
                if info.isdir():
                    continue
                if not info.isfile() or info.issparse():  # no bytes at an offset to read
                    raise ShardIndexError(
                        f"{path}: member {info.name!r} is {_kind(info)}: only regular files "
                        "are read from a shard"
                    )
                split = split_member(info.name)
                if split is None:
                    continue  # no extension, or WebDataset's metadata: in no sample
                key, extension = split
                name = _named(path, info.name, extension)
                if not samples or samples[-1][0] != key:
                    if key in seen:
                        raise ShardIndexError(
                            f"{path}: the members of sample {key!r} are not adjacent"
                        )
                    seen.add(key)
                    samples.append((key, {}))
                    names = {}
                if name in names:
                    raise ShardIndexError(
                        f"{path}: sample {key!r} has two members named {name!r}: "
                        f"{names[name]!r} and {info.name!r} (extensions are read in lower "
                        "case, '.' and '-' as '_'; WebDataset refuses two of one extension)"
                    )
                names[name] = info.name
                samples[-1][1][name] = Member(name, info.offset_data, info.size)
    except (tarfile.TarError, EOFError) as error:
        raise ShardIndexError(f"{path}: not a readable tar ({error})") from None
    size = path.stat().st_size
    for key, members in samples:
        for member in members.values():
            if member.offset + member.size > size:
                raise ShardIndexError(f"{path}: member {key}.{member.extension} runs past the end")
    return shard_entry(path.name, size, file_sha256(path), samples)


def _named(path: Path, member: str, extension: str) -> str:
    """The index's name of ``member`` of tar ``path``, its extension ``extension``."""
    if not _is_utf8(member):  # the index and its digest are UTF-8: no lone surrogates
        raise ShardIndexError(
            f"{path}: member name {_raw(member)!r} is not UTF-8 (Latin-1?): shard indexes "
            "name members in UTF-8; rename it in the tar"
        )
    try:
        name = member_name(extension)
    except ValueError as error:
        raise ShardIndexError(f"{path}: member {member!r}: {error}") from None
    named, decoded = extension, name
    for _ in range(2):  # WebDataset takes one .gz off, then decodes by the last extension
        last, ours = named.rpartition(".")[2], decoded_as(decoded)
        if ours != last and is_decoded(ours):  # a '_' or '-' in its last extension
            raise ShardIndexError(
                f"{path}: member {member!r}: the index names it {name!r}, which would be "
                f"decoded as .{ours}, where WebDataset keeps it as bytes (its last extension "
                f"is .{last}); rename it"
            )
        if ours != GZIP:
            break
        named, decoded = named.removesuffix(GZIP).removesuffix("."), without_gzip(decoded)
    return name


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _raw(name: str) -> bytes:
    """The bytes of a name tarfile read with ``surrogateescape``."""
    return name.encode("utf-8", "surrogateescape")
