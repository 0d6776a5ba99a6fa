"""The fastload LMDB record format: pickle-free, versioned, checksummed.

A record is a fixed header, an optional label array, (version 2) named fields, an
optional payload array descriptor, then the payload::

    offset  size  field
    0       4     magic b"FLR1"
    4       1     format version: 1, or 2 for a record with named fields
    5       1     payload kind: 0 = encoded image file bytes, 1 = raw array
    6       1     label kind: 0 = int64 scalar, 1 = array, 2 = none
    7       1     reserved (0)
    8       4     CRC-32 (little-endian uint32): version 1 of the payload, version 2 of
                  everything after the header
    12      8     label value if kind 0 (little-endian int64), else 0
    20      ...   label array if kind 1: array descriptor + its bytes
    ...     ...   version 2: field count (uint16), then each field
    ...     ...   payload array descriptor if kind 1
    ...     ...   payload

An array descriptor is: dtype string length (uint8), dtype string (NumPy's, e.g.
``<u1``; numeric and bool dtypes only), ndim (uint8), each dimension (uint32).

A field is: name length (uint8), name (UTF-8), role length (uint8), role (ASCII: what
the array is, e.g. ``boxes.XYXY`` or ``mask``, see :mod:`fastload.records.targets`),
storage (uint8: 0 = raw, 1 = PNG), the array descriptor, then the array's bytes (raw)
or a uint32 length and a lossless PNG of the array as a 2-D image (rows: every
dimension but the last). uint8 and uint16 arrays of 2 or more dimensions, such as
masks, are stored as PNG: the instance masks of a 640x480 ShapesDetection image
(1 to 4 shapes) are 90 to 170x smaller than raw.

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
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import cv2
import numpy as np

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "META_KEY",
    "PROGRESS_KEY",
    "Field",
    "Record",
    "RecordFormatError",
    "decode_meta",
    "encode_meta",
    "index_key",
    "pack_record",
    "unpack_record",
]

FORMAT_NAME = "fastload-lmdb"
FORMAT_VERSION = 2
MAGIC = b"FLR1"
META_KEY = b"__fastload_meta__"  # '_' sorts after digits: after every record key
PROGRESS_KEY = b"__fastload_progress__"
#: How an error names the option that finishes a conversion stopped part-way, for both
#: entry points: the writers' keyword (``write_lmdb``, ``write_shards``) and the flag of
#: ``fastload convert``.
RESUME = "resume=True (`fastload convert --resume`)"
ENCODED, ARRAY = 0, 1
LABEL_INT, LABEL_ARRAY, LABEL_NONE = 0, 1, 2
RAW, PNG = 0, 1
PNG_MIN_ELEMENTS = 1024  # below this a PNG's own ~70 bytes of structure cost more than it saves

_HEADER = struct.Struct("<4sBBBBIq")
#: What arrays may hold: bool, integers and floats that NumPy and PyTorch both read
#: (never object dtypes, nor float128, which torch.from_numpy refuses), stored little-endian
_STORABLE = frozenset(
    np.dtype(name).newbyteorder("<")
    for name in ("?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8")
)
_PICKLE_PROTOCOL_MARK = 0x80
MAX_NDIM = 32  # NumPy 1.x's own limit: a record can always be read back
#: What a PNG field's pixels are: the dtype stored, and the PNG's (8 or 16 bits, grey)
_PNG_DTYPES: dict[np.dtype, np.dtype] = {
    np.dtype(np.bool_): np.dtype(np.uint8),
    np.dtype(np.uint8): np.dtype(np.uint8),
    np.dtype(np.uint16): np.dtype(np.uint16),
}


class RecordFormatError(ValueError):
    """A value or database that is not in the fastload format; nothing was executed.

    Example:
        >>> from fastload.records.format import unpack_record
        >>> unpack_record(b"not a record", what="record 0")
        Traceback (most recent call last):
        ...
        fastload.records.format.RecordFormatError: record 0: not a fastload record
    """


class Field(NamedTuple):
    """A named array of a record and its ``role`` (``"array"``, ``"mask"``,
    ``"boxes.XYXY"``, ...): what it becomes when read as a target."""

    role: str
    array: np.ndarray


class Record(NamedTuple):
    """One parsed record: ``payload`` is encoded file bytes (a memoryview into the
    database when parsed with ``copy=False``) or a raw array; ``fields`` its named
    arrays (version 2)."""

    payload: bytes | memoryview | np.ndarray
    label: int | np.ndarray | None
    crc32: int
    fields: Mapping[str, Field] = MappingProxyType({})

    @property
    def encoded(self) -> bool:
        return not isinstance(self.payload, np.ndarray)


def index_key(index: int) -> bytes:
    return b"%010d" % index


def _little_endian(array: np.ndarray) -> np.ndarray:
    """``array`` in the stored byte order; a TypeError for a dtype that cannot be stored."""
    dtype = array.dtype.newbyteorder("<")
    if dtype not in _STORABLE:
        raise TypeError(
            "only bool, integer and float arrays of at most 64 bits can be stored, got dtype "
            f"{array.dtype}"
        )
    return array.astype(dtype, copy=False)


def _pack_descriptor(array: np.ndarray) -> bytes:
    array = _little_endian(array)
    if array.ndim > MAX_NDIM:
        raise ValueError(f"arrays of at most {MAX_NDIM} dimensions can be stored, got {array.ndim}")
    dtype = array.dtype.str.encode("ascii")
    return bytes([len(dtype)]) + dtype + struct.pack(f"<B{array.ndim}I", array.ndim, *array.shape)


def _pack_array(array: np.ndarray) -> bytes:
    return _pack_descriptor(array) + np.ascontiguousarray(_little_endian(array)).tobytes()


def _unpack_descriptor(
    view: memoryview, offset: int, *, what: str
) -> tuple[np.dtype, tuple[int, ...], int]:
    try:
        length = view[offset]
        dtype = np.dtype(bytes(view[offset + 1 : offset + 1 + length]).decode("ascii"))
        offset += 1 + length
        ndim = view[offset]
        shape = struct.unpack_from(f"<{ndim}I", view, offset + 1)
        offset += 1 + 4 * ndim
    except (IndexError, struct.error, TypeError, ValueError) as error:  # incl. Unicode errors
        raise RecordFormatError(f"{what}: malformed array descriptor ({error})") from error
    if dtype.newbyteorder("<") not in _STORABLE or dtype.fields is not None or dtype.subdtype:
        raise RecordFormatError(f"{what}: refusing array of dtype {dtype}")
    if ndim > MAX_NDIM:
        raise RecordFormatError(f"{what}: array of {ndim} dimensions, at most {MAX_NDIM} allowed")
    return dtype, shape, offset


def _unpack_array(view: memoryview, offset: int, *, what: str) -> tuple[np.ndarray, int]:
    dtype, shape, offset = _unpack_descriptor(view, offset, what=what)
    size = math.prod(shape) * dtype.itemsize  # Python ints: a crafted shape cannot wrap
    if offset + size > len(view):
        raise RecordFormatError(f"{what}: array needs {size} bytes, record is shorter")
    array = np.frombuffer(
        view, dtype, count=size // dtype.itemsize if dtype.itemsize else 0, offset=offset
    )
    return array.reshape(shape).astype(dtype.newbyteorder("="), copy=True), offset + size


def _png_storable(array: np.ndarray) -> bool:
    return (
        array.dtype in _PNG_DTYPES
        and array.ndim >= 2
        and array.size >= PNG_MIN_ELEMENTS
        and max(array.shape[-1], array.size // array.shape[-1]) < 1 << 31
    )


def _pack_field(name: str, field: Field) -> bytes:
    encoded_name, role = name.encode("utf-8"), field.role.encode("ascii")
    if not 0 < len(encoded_name) < 256 or not 0 < len(role) < 256:
        raise ValueError(f"field {name!r}: name and role must be 1 to 255 bytes")
    head = bytes([len(encoded_name)]) + encoded_name + bytes([len(role)]) + role
    array = np.asarray(field.array)
    if not _png_storable(array):
        return head + bytes([RAW]) + _pack_array(array)
    image = array.reshape(-1, array.shape[-1]).view(_PNG_DTYPES[array.dtype])
    ok, png = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise ValueError(f"field {name!r}: OpenCV could not encode it as PNG")
    return head + bytes([PNG]) + _pack_descriptor(array) + struct.pack("<I", len(png)) + png.data


def _unpack_png(
    view: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, ...], *, what: str
) -> tuple[np.ndarray, int]:
    from fastload.decode.opencv import MAX_PIXELS

    (length,) = struct.unpack_from("<I", view, offset)
    png = view[offset + 4 : offset + 4 + length]
    if len(png) != length or dtype not in _PNG_DTYPES or len(shape) < 2:
        raise RecordFormatError(f"{what}: malformed PNG field")
    width, rows = shape[-1], math.prod(shape[:-1])
    # The header is checked before decoding: a crafted PNG cannot make us allocate more
    # than the descriptor declares.
    bits = 8 * _PNG_DTYPES[dtype].itemsize
    header = bytes(png[:26])
    if (
        header[:8] != b"\x89PNG\r\n\x1a\n"
        or header[12:16] != b"IHDR"
        or struct.unpack(">II", header[16:24]) != (width, rows)
        or tuple(header[24:26]) != (bits, 0)  # bit depth, grey
        or (MAX_PIXELS is not None and width * rows > MAX_PIXELS)
    ):
        raise RecordFormatError(f"{what}: PNG field does not match its {shape} {dtype} descriptor")
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None or image.shape != (rows, width):
        raise RecordFormatError(f"{what}: PNG field does not decode")
    if dtype == np.bool_ and image.max(initial=0) > 1:
        raise RecordFormatError(f"{what}: boolean PNG field holds values other than 0 and 1")
    return image.view(dtype).reshape(shape), offset + 4 + length


def _unpack_fields(view: memoryview, offset: int, *, what: str) -> tuple[dict[str, Field], int]:
    fields: dict[str, Field] = {}
    try:
        (count,) = struct.unpack_from("<H", view, offset)
        offset += 2
        for _ in range(count):
            length = view[offset]
            name = bytes(view[offset + 1 : offset + 1 + length]).decode("utf-8")
            offset += 1 + length
            length = view[offset]
            role = bytes(view[offset + 1 : offset + 1 + length]).decode("ascii")
            storage, offset = view[offset + 1 + length], offset + 2 + length
            where = f"{what} field {name!r}"
            if storage == RAW:
                array, offset = _unpack_array(view, offset, what=where)
            elif storage == PNG:
                dtype, shape, offset = _unpack_descriptor(view, offset, what=where)
                array, offset = _unpack_png(view, offset, dtype, shape, what=where)
            else:
                raise RecordFormatError(f"{where}: unknown storage {storage}")
            if name in fields:
                raise RecordFormatError(f"{where}: stored twice")
            fields[name] = Field(role, array)
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise RecordFormatError(f"{what}: malformed fields ({error})") from error
    return fields, offset


def pack_record(
    payload: bytes | np.ndarray, label: Any = None, fields: Mapping[str, Field] | None = None
) -> bytes:
    """Serialise one record. ``payload``: encoded image bytes or a raw array; ``label``:
    an int, a small array (multi-label), or None; ``fields``: named arrays with their
    roles (a version 2 record; without them the record is version 1).

    Example:
        >>> unpack_record(pack_record(b"jpeg bytes", 3), what="doc").label
        3
        >>> boxes = Field("boxes.XYXY", np.array([[1, 2, 30, 40]], np.float32))
        >>> unpack_record(pack_record(b"jpeg bytes", None, {"boxes": boxes}), what="doc").fields
        {'boxes': Field(role='boxes.XYXY', array=array([[ 1.,  2., 30., 40.]], dtype=float32))}
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
    if fields is None:
        version, checksum = 1, zlib.crc32(body)
    else:
        if len(fields) >= 1 << 16:
            raise ValueError(f"at most 65535 fields in a record, got {len(fields)}")
        packed = [_pack_field(name, field) for name, field in fields.items()]
        body = label_body + struct.pack("<H", len(packed)) + b"".join(packed) + body
        label_body, version, checksum = b"", 2, zlib.crc32(body)
    header = _HEADER.pack(MAGIC, version, kind, label_kind, 0, checksum, label_value)
    return header + label_body + body


def unpack_record(
    value: bytes | memoryview, *, what: str, check: bool = False, copy: bool = True
) -> Record:
    """Parse one record; ``what`` names it in errors (its key). Never unpickles.

    ``copy=False`` leaves encoded payloads as views into ``value`` (no copy), for a
    caller that is done with them before ``value`` goes away.

    Raises:
        RecordFormatError: Not a fastload record (a pickle is recognised and refused),
            a newer version, a malformed header or field, or (``check=True``) a CRC
            mismatch.
    """
    view = memoryview(value)
    try:
        magic, version, kind, label_kind, reserved, checksum, label_value = _HEADER.unpack_from(
            view
        )
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
    if version < 1 or reserved != 0:
        raise RecordFormatError(
            f"{what}: malformed header (version {version}, reserved {reserved})"
        )
    offset = _HEADER.size
    if check and version >= 2 and zlib.crc32(view[offset:]) != checksum:
        raise RecordFormatError(f"{what}: CRC-32 mismatch, the record is corrupt")
    label: int | np.ndarray | None
    if label_kind == LABEL_INT:
        label = label_value
    elif label_kind == LABEL_ARRAY:
        label, offset = _unpack_array(view, offset, what=what)
    elif label_kind == LABEL_NONE:
        label = None
    else:
        raise RecordFormatError(f"{what}: unknown label kind {label_kind}")
    fields: dict[str, Field] = {}
    if version >= 2:
        fields, offset = _unpack_fields(view, offset, what=what)
    body = view[offset:]
    if check and version == 1 and zlib.crc32(body) != checksum:
        raise RecordFormatError(f"{what}: CRC-32 mismatch, the record is corrupt")
    if kind == ENCODED:
        payload: bytes | memoryview | np.ndarray = bytes(body) if copy else body
    elif kind == ARRAY:
        payload, _ = _unpack_array(view, offset, what=what)
    else:
        raise RecordFormatError(f"{what}: unknown payload kind {kind}")
    return Record(payload, label, checksum, fields)


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
    for key in ("classes", "fields"):  # what a reader acts on
        names = meta.get(key)
        if names is not None and not (
            isinstance(names, list) and all(isinstance(name, str) for name in names)
        ):
            raise RecordFormatError(f"{what}: metadata {key} {names!r:.60} is not a list of names")
    return meta
