"""A shard's member table (index versions 3 and 4): each sample's key and members
(extension, offset, size), a small binary block at the end of the shard's file (version
4) or in a file beside the shard, ``NAME.idx`` (version 3), read the first time the
shard is opened. ``index.json`` then holds only per-shard facts, so it grows with the
number of shards, not of samples.

The format (all integers little-endian; arrays back to back, in this order, so each one
starts aligned to its width):

=========================  ========================================================
header, 32 bytes           ``b"FLTABLE\\0"``, version (u32, 1), samples (u32),
                           members (u32), extensions (u32), key bytes (u64)
``offsets`` u64[members]   each member's data offset in the tar
``sizes`` u64[members]     each member's size
``key_ends`` u64[samples]  where each key ends in the key blob (it starts where the
                           previous one ends)
``first`` u32[samples+1]   the first member of each sample; the last is ``members``
``extension`` u16[members] each member's extension, a number into the extension list
key blob                   the keys, UTF-8, back to back
extension list             the extension names, UTF-8, separated by NUL
=========================  ========================================================

A sample's members are ``first[i]`` up to ``first[i + 1]``, in the order they are in the
tar. Nothing is ever unpickled; :func:`read_table` checks every count, offset and size
against the shard before anything is read from it.

Example:
    >>> from fastload.shards.format.index import Member
    >>> samples = [("000", {"jpg": Member("jpg", 512, 10), "cls": Member("cls", 1024, 1)})]
    >>> table = read_table(table_bytes(samples), "x.idx", shard_size=2048, count=1)
    >>> table.key(0), table.members(0)["cls"].offset
    ('000', 1024)
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

import numpy as np

from fastload.shards.format.index import Member, ShardIndexError

__all__ = ["MAGIC", "MemberTable", "read_table", "table_bytes"]

MAGIC = b"FLTABLE\0"
TABLE_VERSION = 1
_HEADER = struct.Struct("<8sIIIIQ")
_EXTENSION = re.compile(r"^\w+$")
# keys from tar names may hold lone surrogates (surrogateescape): kept as they are
_TEXT = "surrogatepass"


class MemberTable:
    """One shard's samples, as arrays: a key and a dict of members per sample, made on
    request (a table of 10,000 samples holds a few hundred kB, not 10,000 dicts)."""

    def __init__(
        self,
        keys: list[str],
        extensions: list[str],
        first: np.ndarray,
        extension: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
    ) -> None:
        self.keys, self.extensions = keys, extensions
        self.first, self.extension, self.offsets, self.sizes = first, extension, offsets, sizes

    @classmethod
    def of(cls, samples: list[tuple[str, dict[str, Member]]]) -> MemberTable:
        """The table of samples listed inline (an index of version 1 or 2)."""
        names: dict[str, int] = {}
        ids, offsets, sizes, first = [], [], [], [0]
        for _key, members in samples:
            for member in members.values():
                ids.append(names.setdefault(member.extension, len(names)))
                offsets.append(member.offset)
                sizes.append(member.size)
            first.append(len(ids))
        return cls(
            [key for key, _ in samples], list(names),
            np.array(first, np.int64), np.array(ids, np.int64),
            np.array(offsets, np.int64), np.array(sizes, np.int64),
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.keys)

    def key(self, place: int) -> str:
        return self.keys[place]

    def members(self, place: int) -> dict[str, Member]:
        """Sample ``place``'s members by extension, in their order in the tar."""
        found = {}
        for member in range(int(self.first[place]), int(self.first[place + 1])):
            name = self.extensions[int(self.extension[member])]
            found[name] = Member(name, int(self.offsets[member]), int(self.sizes[member]))
        return found

    def samples(self) -> Iterator[tuple[str, dict[str, Member]]]:
        for place in range(len(self)):
            yield self.key(place), self.members(place)


def table_bytes(samples: list[tuple[str, dict[str, Member]]]) -> bytes:
    """The member table file of a shard's ``samples`` (see the module's format)."""
    table = MemberTable.of(samples)
    keys = [key.encode("utf-8", _TEXT) for key in table.keys]
    blob = b"".join(keys)
    header = _HEADER.pack(MAGIC, TABLE_VERSION, len(keys), len(table.offsets),
                          len(table.extensions), len(blob))  # fmt: skip
    return b"".join([
        header,
        table.offsets.astype("<u8").tobytes(),
        table.sizes.astype("<u8").tobytes(),
        np.cumsum([len(key) for key in keys], dtype=np.int64).astype("<u8").tobytes(),
        table.first.astype("<u4").tobytes(),
        table.extension.astype("<u2").tobytes(),
        blob,
        "\0".join(table.extensions).encode(),
    ])  # fmt: skip


def read_table(data: bytes, where: str, *, shard_size: int, count: int) -> MemberTable:
    """The table in ``data`` (named ``where`` in errors), checked against its shard: of
    ``count`` samples, every member inside the shard's ``shard_size`` bytes.

    Raises:
        ShardIndexError: Another format or version, a length that does not match its
            counts, or a key, extension, offset or size that is inconsistent.
    """
    if len(data) < _HEADER.size or data[:8] != MAGIC:
        raise ShardIndexError(f"{where}: not a fastload member table")
    _, version, samples, members, extensions, key_bytes = _HEADER.unpack_from(data)
    if version != TABLE_VERSION:
        raise ShardIndexError(
            f"{where}: member table version {version}, this fastload reads {TABLE_VERSION}"
        )
    if samples != count:
        raise ShardIndexError(f"{where}: {samples} samples, the index says {count}")
    arrays = 16 * members + 8 * samples + 4 * (samples + 1) + 2 * members
    if len(data) < _HEADER.size + arrays + key_bytes:
        raise ShardIndexError(f"{where}: cut short ({len(data)} bytes for its counts)")
    at = _HEADER.size

    def array(dtype: str, length: int) -> np.ndarray:
        nonlocal at
        values = np.frombuffer(data, dtype, length, at).astype(np.int64)
        at += values.size * np.dtype(dtype).itemsize
        return values

    offsets, sizes = array("<u8", members), array("<u8", members)
    key_ends, first, extension = (
        array("<u8", samples),
        array("<u4", samples + 1),
        array("<u2", members),
    )
    blob = data[at : at + key_bytes]
    try:
        tail = data[at + key_bytes :].decode()
    except UnicodeDecodeError:
        raise ShardIndexError(f"{where}: its extension list is not UTF-8") from None
    listed = tail.split("\0") if tail else []
    if len(listed) != extensions or not all(_EXTENSION.match(name) for name in listed):
        raise ShardIndexError(f"{where}: its extension list is malformed")
    if len(set(listed)) != len(listed):
        raise ShardIndexError(f"{where}: an extension listed twice")
    if (
        first[0] != 0 or first[-1] != members or (np.diff(first) < 1).any()
        or (extension >= extensions).any()
    ):  # fmt: skip
        raise ShardIndexError(f"{where}: its samples' members are malformed")
    # unsigned values past 2**63 read as negative here: refused with the rest
    outside = (offsets < 0) | (sizes < 0) | (offsets > shard_size) | (sizes > shard_size - offsets)
    if outside.any():
        bad = int(np.argmax(outside))
        sample = int(np.searchsorted(first, bad, side="right")) - 1
        raise ShardIndexError(
            f"{where}: member {sample} (its sample's {listed[extension[bad]]}) at "
            f"{offsets[bad]} + {sizes[bad]} bytes lies outside the shard's {shard_size}"
        )
    starts = np.concatenate([[0], key_ends[:-1]]) if samples else key_ends
    if samples and (
        key_ends[-1] != key_bytes or (np.diff(starts) < 0).any() or (key_ends < starts).any()
    ):
        raise ShardIndexError(f"{where}: its keys are malformed")
    try:
        keys = [
            blob[s:e].decode("utf-8", _TEXT)
            for s, e in zip(starts.tolist(), key_ends.tolist(), strict=True)
        ]
    except UnicodeDecodeError:
        raise ShardIndexError(f"{where}: a key that is not UTF-8") from None
    for sample in range(samples):  # an extension twice in one sample: which would it read?
        own = extension[first[sample] : first[sample + 1]]
        if len(np.unique(own)) != len(own):
            raise ShardIndexError(f"{where}: sample {keys[sample]!r} lists an extension twice")
    return MemberTable(keys, listed, first, extension, offsets, sizes)
