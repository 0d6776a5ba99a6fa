"""The index of a shard set: ``index.json``, written last, so that a shard set without
it is visibly incomplete. Per shard: its name, size in bytes, SHA-256, and (since
version 3) its sample count, extensions and its member table's size and SHA-256. The
table (:mod:`fastload.shards.format.table`) holds each sample's key and members (extension,
offset of the data in the tar, size) and is read when the shard is first opened: in
version 4, the last ``table_size`` bytes of the shard file itself, after the tar's end
(every tar reader stops before it; a shard fetched whole brings its table, and its
SHA-256 covers it); in version 3, ``NAME.idx`` beside the shard (what an upgrade of an
older index and a scan of public tars write, leaving the tars as they are). Versions 1
and 2 list the members inline. Every version is still read.

Read with :func:`load_index`, which checks everything a hostile index could lie about
(names, offsets, sizes, counts) before any shard is read. Since version 2 the index
carries ``shards_sha256``, the digest of its own shard list: an index edited or damaged
after it was written is refused, and the digest names the shard set (a sampler state
saved on one set is refused on another).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastload._atomic import temporary_names, write_whole

__all__ = [
    "BESIDE",
    "INDEX",
    "VERSION",
    "Member",
    "Shard",
    "ShardIndexError",
    "clear_temporaries",
    "index_bytes",
    "load_index",
    "refuse_unfinished",
    "shard_entry",
    "shards_digest",
    "table_name",
    "write_inline_index",
]

INDEX = "index.json"
PROGRESS = ".fastload-progress.json"  # an unfinished conversion: not a shard set yet
# 2: shards_sha256, the digest of the shard list; 3: members in a table per shard
VERSION = 4  # member tables inside the shards
BESIDE = 3  # member tables beside the shards, each a file of its own
INLINE = 2  # the last version with members inline (a scan held in memory is one)
TABLE = ".idx"  # a shard's member table is its name and this
# A file beside the index: no path, no traversal, not one of the cache's own dot-files;
# spaces and any script are names (``train 0.tar``, ``données-0.tar``).
_NAME = re.compile(r"^[^./\\\x00][^/\\\x00]*$")
_EXTENSION = re.compile(r"^\w+$")  # letters of any script, digits, _ (``café``, ``seg_png``)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ShardIndexError(ValueError):
    """An index that is missing, of another format, or inconsistent; names the file."""


@dataclass(frozen=True)
class Member:
    extension: str
    offset: int
    size: int


@dataclass(frozen=True)
class Shard:
    """A shard's facts from the index. Its members are inline (``samples``: versions 1
    and 2) or in its member table (``samples`` is None, the table's size and SHA-256
    are here): inside the shard, its last ``table_size`` bytes (``table_inside``:
    version 4), or a file beside it (version 3)."""

    name: str
    size: int
    sha256: str
    samples: list[tuple[str, dict[str, Member]]] | None = None
    count: int = 0
    extensions: tuple[str, ...] = ()
    table_size: int = 0
    table_sha256: str = ""
    table_inside: bool = False


def table_name(shard: str) -> str:
    """The file of a shard's member table, beside it: ``shard-000001.tar.idx``."""
    return shard + TABLE


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read 1 MiB at a time: what the index records per shard."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shard_entry(
    name: str, size: int, sha256: str, samples: list[tuple[str, dict[str, Member]]]
) -> dict[str, Any]:
    return {
        "name": name, "size": size, "sha256": sha256,
        "samples": [
            [key, {ext: [m.offset, m.size] for ext, m in members.items()}]
            for key, members in samples
        ],
    }  # fmt: skip


def shards_digest(shards: list[Any]) -> str:
    """The SHA-256 of an index's shard list, as JSON with sorted keys and no spaces."""
    canonical = json.dumps(shards, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def index_bytes(
    shards: list[dict[str, Any]], meta: dict[str, Any], version: int = VERSION
) -> bytes:
    """An index's content: its format, version, metadata, shard list and that list's
    digest (``version`` 3's entries name their tables, ``INLINE``'s list members)."""
    content = {"format": "fastload-shards", "version": version, **meta,
               "shards_sha256": shards_digest(shards), "shards": shards}  # fmt: skip
    return json.dumps(content, ensure_ascii=False).encode()


def write_inline_index(folder: Path, shards: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """``index.json`` of version 2 (members inline), written whole or not at all, and only
    one that loads: checked as :func:`parse_index` checks it first (a refusal writes
    nothing), then a temporary file of this writer's own renamed. New shard sets get
    version 4 (:func:`fastload.shards.format.layout.write_index`); this writes the old layout,
    for the tests that read it."""
    path = folder / INDEX
    data = index_bytes(shards, meta, INLINE)
    parse_index(data, str(path))
    write_whole(path, data)
    return path


def clear_temporaries(folder: Path) -> None:
    """Remove what an index writer killed in ``folder`` left: the temporary files of
    :func:`~fastload._atomic.write_whole` for ``index.json`` and member tables, by their
    exact naming (:func:`~fastload._atomic.temporary_names`), nothing else. Not while
    another writer indexes the same folder: its temporary file would go."""
    own = temporary_names(rf"{re.escape(INDEX)}|.+{re.escape(TABLE)}")
    for leftover in folder.glob(".*.tmp"):
        if own.fullmatch(leftover.name) and leftover.is_file():
            leftover.unlink(missing_ok=True)


def refuse_unfinished(folder: Path) -> None:
    """Refuse to index ``folder`` while it holds a fastload conversion that stopped
    part-way: its shards are part of the samples, and an index would end the conversion.

    Raises:
        ShardIndexError: Naming the folder and how to finish the conversion.
    """
    if (folder / PROGRESS).exists():
        raise ShardIndexError(
            f"{folder}: holds an unfinished fastload conversion ({PROGRESS}): finish it with "
            "`fastload convert ... --resume` (resume=True), not by indexing its shards"
        )


def load_index(folder: Path) -> tuple[list[Shard], dict[str, Any]]:
    """The shards of ``folder``'s index and its metadata, checked (see :func:`parse_index`),
    each shard's file present and of the indexed size.

    Raises:
        ShardIndexError: No index (an incomplete or foreign folder), or one that
            :func:`parse_index` refuses, or a shard whose file is missing or of another size.
    """
    path = folder / INDEX
    if not path.is_file():
        raise ShardIndexError(
            f"{folder}: no {INDEX}: not a fastload shard set, or its conversion did not "
            "finish (the index is written last)"
        )
    return index_of(folder, path.read_bytes(), str(path))


def index_of(folder: Path, data: bytes, where: str) -> tuple[list[Shard], dict[str, Any]]:
    """The shards and metadata of the index ``data`` (named ``where`` in errors) of the
    shards in ``folder``, checked as :func:`load_index` checks them."""
    shards, meta = parse_index(data, where)
    for number, shard in enumerate(shards):
        file = folder / shard.name
        if not file.is_file():
            raise ShardIndexError(f"{where}: shard {number}: {file} is missing")
        if file.stat().st_size != shard.size:
            raise ShardIndexError(
                f"{where}: shard {number}: {file} has {file.stat().st_size} bytes, "
                f"the index says {shard.size}"
            )
    return shards, meta


def parse_index(data: bytes, where: str) -> tuple[list[Shard], dict[str, Any]]:
    """An index's shards and metadata, from its bytes (``where`` names it in errors).

    Raises:
        ShardIndexError: Not JSON, another format or a newer version, or an entry that
            is inconsistent (a name with a path, an offset or size outside its shard).
    """
    try:
        parsed = json.loads(data)
    except RecursionError:
        raise ShardIndexError(f"{where}: not an index (nested too deeply to read)") from None
    except ValueError as error:  # not JSON, not UTF-8, an integer of thousands of digits
        raise ShardIndexError(f"{where}: not JSON ({error})") from None
    if not isinstance(parsed, dict) or parsed.get("format") != "fastload-shards":
        raise ShardIndexError(f"{where}: not a fastload shard index")
    version = parsed.get("version")
    # a bool is an int to Python, and 2.0 or "2" are not versions
    if type(version) is not int or not 1 <= version <= VERSION:
        raise ShardIndexError(
            f"{where}: index version {version!r} (its version field): this fastload reads "
            f"versions 1 to {VERSION}"
        )
    entries = parsed.get("shards", [])
    if not isinstance(entries, list):
        raise ShardIndexError(f"{where}: shards is not a list")
    digest = shards_digest(entries)
    if parsed["version"] >= 2 and parsed.get("shards_sha256") != digest:
        raise ShardIndexError(
            f"{where}: shards_sha256 does not match its shard list: the index was edited or "
            "damaged after it was written"
        )
    if parsed["version"] >= BESIDE:
        inside = parsed["version"] > BESIDE
        shards = [_tabled(entry, where, number, inside) for number, entry in enumerate(entries)]
        tables = set() if inside else {table_name(shard.name) for shard in shards}
        clash = next((shard.name for shard in shards if shard.name in tables), None)
        if clash is not None:  # a shard whose name is another's table
            raise ShardIndexError(f"{where}: shard {clash} is named as a member table")
    else:
        shards = [_shard(entry, where, number) for number, entry in enumerate(entries)]
    meta = {key: value for key, value in parsed.items() if key != "shards"}
    meta["shards_sha256"] = digest  # version 1 too: it names the shard set
    return shards, meta


def _facts(entry: Any, where: str) -> tuple[str, int, str]:
    """A shard entry's name, size and SHA-256, checked."""
    name, size, sha256 = entry["name"], entry["size"], entry["sha256"]
    if not isinstance(name, str) or not _NAME.match(name) or name == INDEX:
        raise ShardIndexError(f"{where}: {name!r} is not a file name beside the index")
    if not isinstance(size, int) or size < 0:
        raise ShardIndexError(f"{where} ({name}): size {size!r}")
    if not isinstance(sha256, str) or not _SHA256.match(sha256):  # its bytes are checked by it
        raise ShardIndexError(f"{where} ({name}): sha256 {sha256!r} is not a SHA-256 in hex")
    return name, size, sha256


def _tabled(entry: Any, index: str, number: int, inside: bool) -> Shard:
    """An entry of version 3 or (``inside``) 4: the shard's facts and its table's."""
    where = f"{index}: shard {number}"
    try:
        name, size, sha256 = _facts(entry, where)
        count, extensions = entry["count"], entry["extensions"]
        table_size, table_sha256 = entry["table_size"], entry["table_sha256"]
    except (KeyError, TypeError):
        raise ShardIndexError(
            f"{where}: needs name, size, sha256, count, extensions, table_size and table_sha256"
        ) from None
    if not isinstance(count, int) or count < 0:
        raise ShardIndexError(f"{where} ({name}): count {count!r}")
    if not isinstance(extensions, list) or not all(
        isinstance(ext, str) and _EXTENSION.match(ext) for ext in extensions
    ):
        raise ShardIndexError(f"{where} ({name}): extensions {extensions!r}")
    if not isinstance(table_size, int) or table_size < 0 or (inside and table_size > size):
        raise ShardIndexError(f"{where} ({name}): table_size {table_size!r}")
    if not isinstance(table_sha256, str) or not _SHA256.match(table_sha256):
        raise ShardIndexError(
            f"{where} ({name}): table_sha256 {table_sha256!r} is not a SHA-256 in hex"
        )
    return Shard(name, size, sha256, None, count, tuple(extensions), table_size, table_sha256,
                 inside)  # fmt: skip


def _shard(entry: Any, index: str, number: int) -> Shard:
    where = f"{index}: shard {number}"
    try:
        name, size, sha256 = _facts(entry, where)
        samples = entry["samples"]
    except (KeyError, TypeError):
        raise ShardIndexError(f"{where}: needs name, size, sha256 and samples") from None
    if not isinstance(samples, list):
        raise ShardIndexError(f"{where} ({name}): samples is not a list")
    parsed = []
    for sample in samples:
        if not isinstance(sample, list) or len(sample) != 2:
            raise ShardIndexError(f"{where} ({name}): a sample entry that is not [key, members]")
        key, members = sample
        if not isinstance(key, str) or not isinstance(members, dict) or not members:
            raise ShardIndexError(f"{where} ({name}): a sample entry that is not [key, members]")
        checked = {}
        for extension, span in members.items():
            ok = isinstance(extension, str) and _EXTENSION.match(extension)
            if (
                not ok
                or not isinstance(span, list)
                or len(span) != 2
                or not all(isinstance(v, int) for v in span)
            ):
                raise ShardIndexError(f"{where} ({name}): member {key}.{extension} is malformed")
            offset, length = span
            if offset < 0 or length < 0 or offset + length > size:
                raise ShardIndexError(
                    f"{where} ({name}): member {key}.{extension} at {offset} + {length} bytes "
                    f"lies outside the shard's {size}"
                )
            checked[extension] = Member(extension, offset, length)
        parsed.append((key, checked))
    extensions = tuple(dict.fromkeys(ext for _, members in parsed for ext in members))
    return Shard(name, size, sha256, parsed, len(parsed), extensions)
