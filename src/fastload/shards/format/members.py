"""A sample's members as Python values, decoded by their last extension as WebDataset's
default decoders decode them (``seg.png``, named ``seg_png`` in the index, as a PNG): text,
JSON, class numbers and images; NumPy arrays without pickle; ``.gz`` decompressed, then
decoded by the extension before it; anything else (pickles included: stored data is never
unpickled) as bytes.

Example:
    >>> decode_member("txt", b"a cat", "shard-0.tar:000", load_image=None)
    'a cat'
    >>> decode_member("text_en_txt", b"a cat", "shard-0.tar:000", load_image=None)
    'a cat'
    >>> decode_member("cls", b"7", "shard-0.tar:000", load_image=None)
    7
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from fastload.shards.format.index import ShardIndexError

__all__ = [
    "GZIP",
    "IMAGES",
    "MAX_GUNZIPPED",
    "decode_member",
    "decoded_as",
    "is_decoded",
    "without_gzip",
]

#: Image members, in the order a sample's image is looked for.
IMAGES = ("jpg", "jpeg", "png", "img", "webp", "bmp")
_TEXT = frozenset({"txt", "text", "transcript"})
_JSON = frozenset({"json", "jsn"})
_INTEGER = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
GZIP = "gz"


def decoded_as(name: str) -> str:
    """The extension that decides how the member the index names ``name`` is decoded: its
    last part (``seg_png``: ``png``), as WebDataset decodes ``seg.png`` by ``png``."""
    return name.rpartition("_")[2]


def without_gzip(name: str) -> str:
    """What a ``gz`` member ``name`` is decoded by once decompressed (``txt_gz``: ``txt``)."""
    return name.removesuffix(GZIP).removesuffix("_")


def is_decoded(extension: str) -> bool:
    """Whether a member of last extension ``extension`` is decoded (not kept as bytes)."""
    return extension in IMAGES or extension in _TEXT | _JSON | _INTEGER | {"npy", GZIP}


#: The most a ``.gz`` member may decompress to: a hostile shard's gzip bomb is refused
#: before it fills the memory. Raise it for larger members, before the loader starts:
#: a ShardedDataset carries it into its workers, spawned ones too.
MAX_GUNZIPPED = 1 << 30


def _gunzipped(data: bytes, where: str) -> bytes:
    """``data`` decompressed (every gzip member of it, as ``gzip.decompress``), refused
    past :data:`MAX_GUNZIPPED` bytes or when it is not gzip."""
    parts, size, rest = [], 0, data
    while rest:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # a gzip header and trailer
        try:
            part = stream.decompress(rest, MAX_GUNZIPPED - size + 1)
        except zlib.error as error:
            raise ShardIndexError(f"{where} {data[:32]!r} is not gzip ({error})") from None
        size += len(part)
        if size > MAX_GUNZIPPED:
            raise ShardIndexError(
                f"{where} decompresses to more than {MAX_GUNZIPPED:,} bytes (a gzip bomb?); "
                "raise fastload.shards.format.members.MAX_GUNZIPPED to read it (before the "
                "loader starts: a ShardedDataset carries it into its workers)"
            )
        if not stream.eof:
            raise ShardIndexError(f"{where} is gzip cut short")
        parts.append(part)
        rest = stream.unused_data.lstrip(b"\0")  # gzip pads between members with zeros
    return b"".join(parts)


def decode_member(
    extension: str, data: bytes, source: str, *, load_image: Callable[[bytes], Any] | None
) -> Any:
    """``data``, the ``extension`` member of the sample at ``source``, as a value (by
    :func:`decoded_as` of ``extension``).

    Raises:
        ShardIndexError: A member its extension says is text, JSON, a number, an array or
            gzip that is not one, naming the sample and the member.
    """
    where = f"{source}: its {extension} member"
    kind = decoded_as(extension)
    if kind == GZIP:  # as WebDataset: decompressed once, then decoded by what is before
        data = _gunzipped(data, where)
        kind = decoded_as(without_gzip(extension))
    try:
        if kind in IMAGES and load_image is not None:
            return load_image(data)
        if kind in _TEXT:
            return data.decode("utf-8")
        if kind in _JSON:
            return json.loads(data)
        if kind in _INTEGER:
            return int(data)
        if kind == "npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
    except RecursionError:
        raise ShardIndexError(f"{where} is nested too deeply to read") from None
    except ValueError as error:  # not UTF-8, not JSON, not an integer, not an array
        raise ShardIndexError(
            f"{where} {data[:32]!r} is not what .{kind} holds ({error})"
        ) from None
    return data
