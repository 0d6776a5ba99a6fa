"""A sample's members as Python values, decoded by their extension as WebDataset's default
decoders decode them: text, JSON, class numbers and images; NumPy arrays without pickle;
anything else (pickles included: stored data is never unpickled) as bytes.

Example:
    >>> decode_member("txt", b"a cat", "shard-0.tar:000", load_image=None)
    'a cat'
    >>> decode_member("cls", b"7", "shard-0.tar:000", load_image=None)
    7
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from fastload.shards.index import ShardIndexError

__all__ = ["IMAGES", "decode_member"]

#: Image members, in the order a sample's image is looked for.
IMAGES = ("jpg", "jpeg", "png", "img", "webp", "bmp")
_TEXT = frozenset({"txt", "text", "transcript"})
_JSON = frozenset({"json", "jsn"})
_INTEGER = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})


def decode_member(
    extension: str, data: bytes, source: str, *, load_image: Callable[[bytes], Any] | None
) -> Any:
    """``data``, the ``extension`` member of the sample at ``source``, as a value.

    Raises:
        ShardIndexError: A member its extension says is text, JSON, a number or an array
            that is not one, naming the sample and the member.
    """
    where = f"{source}: its {extension} member"
    try:
        if extension in IMAGES and load_image is not None:
            return load_image(data)
        if extension in _TEXT:
            return data.decode("utf-8")
        if extension in _JSON:
            return json.loads(data)
        if extension in _INTEGER:
            return int(data)
        if extension == "npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
    except RecursionError:
        raise ShardIndexError(f"{where} is nested too deeply to read") from None
    except ValueError as error:  # not UTF-8, not JSON, not an integer, not an array
        raise ShardIndexError(
            f"{where} {data[:32]!r} is not what .{extension} holds ({error})"
        ) from None
    return data
