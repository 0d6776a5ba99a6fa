"""The fastload LMDB record format: pickle-free, versioned, checksummed.

A record is a fixed header, an optional label array, an optional payload array
descriptor, then the payload::

    offset  size  field
    0       4     magic b"FLR1"
    4       1     format version (1)
    5       1     payload kind: 0 = encoded image file bytes, 1 = raw array
    6       1     label kind: 0 = int64 scalar, 1 = array, 2 = none
    7       1     reserved (0)
    8       4     CRC-32 of the payload (little-endian uint32)
    12      8     label value if kind 0 (little-endian int64), else 0
    20      ...   label array if kind 1: array descriptor + its bytes
    ...     ...   payload array descriptor if kind 1
    ...     ...   payload

An array descriptor is: dtype string length (uint8), dtype string (NumPy's, e.g.
``<u1``; numeric and bool dtypes only), ndim (uint8), each dimension (uint32).

Keys are the record index as 10 zero-padded ASCII digits, so index order is key
order. The metadata (JSON under :data:`META_KEY`) is written last: its presence marks
the database complete. A conversion in progress keeps its state in :data:`PROGRESS_KEY`,
committed in the same transaction as the records it describes.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "META_KEY",
    "PROGRESS_KEY",
    "Record",
    "RecordFormatError",
    "decode_meta",
    "encode_meta",
    "index_key",
    "pack_record",
    "unpack_record",
]

FORMAT_NAME = "fastload-lmdb"
FORMAT_VERSION = 1
MAGIC = b"FLR1"
META_KEY = b"__fastload_meta__"  # '_' sorts after digits: after every record key
PROGRESS_KEY = b"__fastload_progress__"
ENCODED, ARRAY = 0, 1
LABEL_INT, LABEL_ARRAY, LABEL_NONE = 0, 1, 2

_HEADER = struct.Struct("<4sBBBBIq")
_ALLOWED_KINDS = frozenset("biuf")  # bool, signed, unsigned, float: never object dtypes
_PICKLE_PROTOCOL_MARK = 0x80
MAX_NDIM = 32  # NumPy 1.x's own limit: a record can always be read back


class RecordFormatError(ValueError):
    """A value or database that is not in the fastload format; nothing was executed."""


class Record(NamedTuple):
    """One parsed record: ``payload`` is encoded file bytes (a memoryview into the
    database when parsed with ``copy=False``) or a raw array."""

    payload: bytes | memoryview | np.ndarray
    label: int | np.ndarray | None
    crc32: int

    @property
    def encoded(self) -> bool:
        return not isinstance(self.payload, np.ndarray)


def index_key(index: int) -> bytes:
    return b"%010d" % index


def _pack_array(array: np.ndarray) -> bytes:
    if array.dtype.kind not in _ALLOWED_KINDS:
        raise TypeError(f"only numeric and bool arrays can be stored, got dtype {array.dtype}")
    if array.ndim > MAX_NDIM:
        raise ValueError(f"arrays of at most {MAX_NDIM} dimensions can be stored, got {array.ndim}")
    dtype = array.dtype.str.encode("ascii")
    shape = struct.pack(f"<B{array.ndim}I", array.ndim, *array.shape)
    return bytes([len(dtype)]) + dtype + shape + np.ascontiguousarray(array).tobytes()


def _unpack_array(view: memoryview, offset: int, *, what: str) -> tuple[np.ndarray, int]:
    try:
        length = view[offset]
        dtype = np.dtype(bytes(view[offset + 1 : offset + 1 + length]).decode("ascii"))
        offset += 1 + length
        ndim = view[offset]
        shape = struct.unpack_from(f"<{ndim}I", view, offset + 1)
        offset += 1 + 4 * ndim
    except (IndexError, struct.error, TypeError, ValueError) as error:  # incl. Unicode errors
        raise RecordFormatError(f"{what}: malformed array descriptor ({error})") from error
    if dtype.kind not in _ALLOWED_KINDS or dtype.fields is not None or dtype.subdtype:
        raise RecordFormatError(f"{what}: refusing array of dtype {dtype}")
    if ndim > MAX_NDIM:
        raise RecordFormatError(f"{what}: array of {ndim} dimensions, at most {MAX_NDIM} allowed")
    size = math.prod(shape) * dtype.itemsize  # Python ints: a crafted shape cannot wrap
    if offset + size > len(view):
        raise RecordFormatError(f"{what}: array needs {size} bytes, record is shorter")
    array = np.frombuffer(
        view, dtype, count=size // dtype.itemsize if dtype.itemsize else 0, offset=offset
    )
    return array.reshape(shape).copy(), offset + size


def pack_record(payload: bytes | np.ndarray, label: Any = None) -> bytes:
    """Serialise one record. ``payload``: encoded image bytes or a raw array; ``label``:
    an int, a small array (multi-label), or None.

    Example:
        >>> unpack_record(pack_record(b"jpeg bytes", 3), what="doc").label
        3
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        kind, body = ENCODED, bytes(payload)
    elif isinstance(payload, np.ndarray):
        kind, body = ARRAY, _pack_array(payload)
    else:
        raise TypeError(f"payload must be bytes or a NumPy array, got {type(payload).__name__}")

    label_value, label_body = 0, b""
    if label is None:
        label_kind = LABEL_NONE
    elif isinstance(label, (int, np.integer)) and not isinstance(label, bool):
        label_kind, label_value = LABEL_INT, int(label)
    else:
        array = np.asarray(label)
        if array.ndim == 0 and array.dtype.kind in "iu":
            label_kind, label_value = LABEL_INT, int(array)
        else:
            label_kind, label_body = LABEL_ARRAY, _pack_array(array)
    checksum = zlib.crc32(body)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, kind, label_kind, 0, checksum, label_value)
    return header + label_body + body


def unpack_record(
    value: bytes | memoryview, *, what: str, check: bool = False, copy: bool = True
) -> Record:
    """Parse one record; ``what`` names it in errors (its key). Never unpickles.

    ``copy=False`` leaves encoded payloads as views into ``value`` (no copy), for a
    caller that is done with them before ``value`` goes away.

    Raises:
        RecordFormatError: Not a fastload record (a pickle is recognised and refused),
            a newer version, a malformed header, or (``check=True``) a CRC mismatch.
    """
    view = memoryview(value)
    try:
        magic, version, kind, label_kind, _, checksum, label_value = _HEADER.unpack_from(view)
    except struct.error:
        magic = None
    if magic != MAGIC:
        pickled = len(view) > 0 and view[0] == _PICKLE_PROTOCOL_MARK
        hint = " (it holds a pickle; refusing to unpickle)" if pickled else ""
        raise RecordFormatError(f"{what}: not a fastload record{hint}")
    if version > FORMAT_VERSION:
        raise RecordFormatError(
            f"{what}: record format version {version} is newer than this fastload reads "
            f"({FORMAT_VERSION}); upgrade fastload"
        )
    offset = _HEADER.size
    label: int | np.ndarray | None
    if label_kind == LABEL_INT:
        label = label_value
    elif label_kind == LABEL_ARRAY:
        label, offset = _unpack_array(view, offset, what=what)
    elif label_kind == LABEL_NONE:
        label = None
    else:
        raise RecordFormatError(f"{what}: unknown label kind {label_kind}")
    body = view[offset:]
    if check and zlib.crc32(body) != checksum:
        raise RecordFormatError(f"{what}: CRC-32 mismatch, the record is corrupt")
    if kind == ENCODED:
        payload: bytes | memoryview | np.ndarray = bytes(body) if copy else body
    elif kind == ARRAY:
        payload, _ = _unpack_array(view, offset, what=what)
    else:
        raise RecordFormatError(f"{what}: unknown payload kind {kind}")
    return Record(payload, label, checksum)


def encode_meta(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True).encode("utf-8")


def decode_meta(value: bytes | memoryview, *, what: str) -> dict[str, Any]:
    """Parse and check the metadata record of the database ``what``."""
    try:
        meta = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordFormatError(f"{what}: metadata is not JSON, not a fastload database") from error
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise RecordFormatError(f"{what}: metadata does not name the {FORMAT_NAME} format")
    version = meta.get("version")
    if not isinstance(version, int):
        raise RecordFormatError(f"{what}: metadata has no format version")
    if version > FORMAT_VERSION:
        raise RecordFormatError(
            f"{what}: database format version {version} is newer than this fastload reads "
            f"({FORMAT_VERSION}); upgrade fastload"
        )
    return meta
