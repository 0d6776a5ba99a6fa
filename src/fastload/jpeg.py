"""The JPEG header, read once per image without decoding or copying the file: sizes,
components, coding, EXIF orientation, and whether the file ends with its end marker.

:func:`read_jpeg_header` walks the marker segments from the start of image to the start
of scan (SOI, APPn, DQT, DHT, SOF, ... SOS) on a view of the encoded bytes, reading only
the few bytes each segment's length and the frame header need, and the EXIF block's
first directory (IFD0) for the orientation tag. Hostile bytes give None, never an
exception: every length is checked against the file and the walk is bounded, so a
caller sends such a file to OpenCV, whose decode names what is wrong with it.

Example:
    >>> import cv2, numpy as np
    >>> ok, data = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
    >>> header = jpeg_header(data)
    >>> header.height, header.width, header.components, header.progressive, header.ends
    (48, 64, 3, False, True)
    >>> jpeg_header(b"GIF89a...") is None
    True
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "FIELDS",
    "SOI",
    "JpegHeader",
    "header_rows",
    "header_table",
    "jpeg_header",
    "read_jpeg_header",
]

_SEGMENT = struct.Struct(">BBH").unpack_from  # 0xFF, marker, segment length
_FRAME = struct.Struct(">BHHB").unpack_from  # precision, height, width, components
_TIFF = {0x49: struct.Struct("<HI").unpack_from, 0x4D: struct.Struct(">HI").unpack_from}
_SHORT = {0x49: struct.Struct("<H").unpack_from, 0x4D: struct.Struct(">H").unpack_from}
_ENTRY = {0x49: struct.Struct("<HHIH").unpack_from, 0x4D: struct.Struct(">HHIH").unpack_from}
# tag 0x0112 (Orientation) as IFD0 stores it, by byte order ("II": little endian)
_ORIENTATION_TAG = {0x49: b"\x12\x01", 0x4D: b"\x01\x12"}
#: JPEG's start-of-image marker, the file's first two bytes.
SOI = b"\xff\xd8"
_EXIF = b"Exif\x00\x00"
_EXIF_BYTES = tuple(_EXIF)

# What a marker before the scan is: a frame header (SOF, any coding), the start of scan,
# APP1 (EXIF's home), a segment with a length to skip, a fill byte, or one with no
# place there (SOI, EOI, RSTn, reserved codes): a header this reader does not follow.
_SKIP, _FRAME_HEADER, _SCAN, _APP1, _FILL, _BAD = range(6)
_KINDS = bytearray([_BAD] * 256)
for _marker in (0xC4, 0xCC, 0xDB, 0xDC, 0xDD, 0xFE, *range(0xE0, 0xF0)):
    _KINDS[_marker] = _SKIP  # DHT, DAC, DQT, DNL, DRI, COM, APPn
for _marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
    _KINDS[_marker] = _FRAME_HEADER
_KINDS[0xDA], _KINDS[0xE1], _KINDS[0xFF] = _SCAN, _APP1, _FILL
_KIND = bytes(_KINDS)

#: Markers and fill bytes walked before giving up: real files have a few dozen segments.
MAX_SEGMENTS = 1024
#: How far from the end the end-of-image marker may lie (a few bytes of padding after it
#: are common; a file cut short has none, since 0xFF 0xD9 cannot occur in scan data).
END_WINDOW = 64
_END = b"\xff\xd9"

_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_TRANSPOSED = frozenset({5, 6, 7, 8})  # EXIF orientations that swap width and height


class JpegHeader(NamedTuple):
    """What a JPEG's header says, before any pixel is decoded.

    ``height`` and ``width`` are the stored image's; :attr:`displayed` applies the
    EXIF ``orientation`` (1 to 8, 1 where the file has none), as decoders that honour it
    (OpenCV, nvImageCodec) return the image. ``frame`` is the frame header's marker
    (0xC0 baseline, 0xC1 extended, 0xC2 progressive, others for lossless or arithmetic
    coding); ``ends``: an end-of-image marker within the last :data:`END_WINDOW` bytes.
    """

    height: int
    width: int
    components: int
    precision: int
    frame: int
    orientation: int
    ends: bool

    @property
    def progressive(self) -> bool:
        return self.frame in _PROGRESSIVE

    @property
    def displayed(self) -> tuple[int, int]:
        """``(height, width)`` of the image as shown, its EXIF orientation applied."""
        if self.orientation in _TRANSPOSED:
            return self.width, self.height
        return self.height, self.width


def jpeg_header(
    data: bytes | bytearray | memoryview | np.ndarray | torch.Tensor,
) -> JpegHeader | None:
    """:func:`read_jpeg_header` of one encoded image (bytes, or a 1-D uint8 array or CPU
    tensor), without copying it."""
    if isinstance(data, torch.Tensor):
        data = data.numpy()
    view = np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        return None
    return read_jpeg_header(view.cast("B"), 0, len(view))


def read_jpeg_header(buffer: bytes | memoryview, start: int, end: int) -> JpegHeader | None:
    """The header of the JPEG in ``buffer[start:end]`` (a ``"B"`` memoryview or bytes:
    several images may share one buffer), or None: not a JPEG, or a header this reader
    cannot follow (cut short, a length past the end, no frame before the scan, a second
    frame, a frame of no pixels, a marker out of place, more than :data:`MAX_SEGMENTS`
    segments)."""
    if start < 0 or end > len(buffer) or end - start < 4:
        return None
    if buffer[start] != 0xFF or buffer[start + 1] != 0xD8:
        return None
    pos, frame, orientation = start + 2, None, 1
    for _ in range(MAX_SEGMENTS):
        if pos + 4 > end:
            return None
        ff, marker, length = _SEGMENT(buffer, pos)
        if ff != 0xFF:
            return None
        kind = _KIND[marker]
        if kind == _FILL:  # 0xFF padding before a marker
            pos += 1
            continue
        after = pos + 2 + length
        if kind == _BAD or length < 2 or after > end:
            return None
        if kind == _FRAME_HEADER:
            if frame is not None or length < 8:
                return None
            precision, height, width, components = _FRAME(buffer, pos + 4)
            # a height of 0 leaves it to a DNL marker, which no decoder here reads
            if length < 8 + 3 * components or not height or not width:
                return None
            frame = (height, width, components, precision, marker)
        elif kind == _APP1 and orientation == 1 and length >= 16:
            orientation = _exif_orientation(buffer, pos + 4, after)
        elif kind == _SCAN:
            if frame is None:
                return None
            return JpegHeader(*frame, orientation, _ends(buffer, after, end))
        pos = after
    return None


def _exif_orientation(buffer: bytes | memoryview, begin: int, end: int) -> int:
    """The orientation tag of the EXIF block in an APP1 segment's ``buffer[begin:end]``
    (1 when it has none, or none this reads: EXIF split over several segments, say)."""
    if tuple(buffer[begin : begin + 6]) != _EXIF_BYTES:
        return 1  # an APP1 of another kind (XMP)
    tiff = begin + 6
    order = buffer[tiff]
    if order not in _TIFF or buffer[tiff + 1] != order:
        return 1
    magic, offset = _TIFF[order](buffer, tiff + 2)
    entries = tiff + offset + 2
    if magic != 42 or entries > end:
        return 1
    (count,) = _SHORT[order](buffer, entries - 2)
    stop = min(entries + 12 * count, end)
    # IFD0's entries are 12 bytes each (tag, type, count, value): find the tag's bytes at
    # an entry's start, in one bounded search of the directory
    table = bytes(buffer[entries:stop])
    tag, at = _ORIENTATION_TAG[order], 0
    while True:  # each turn moves on by one entry at least
        at = table.find(tag, at)
        if at < 0 or at + 12 > len(table):
            return 1
        if at % 12 == 0:
            break
        at += 12 - at % 12
    _, kind, values, value = _ENTRY[order](table, at)
    # SHORT (3): the value sits left-justified in the 4-byte field, in either order
    return value if kind == 3 and values >= 1 and 1 <= value <= 8 else 1


def _ends(buffer: bytes | memoryview, scan: int, end: int) -> bool:
    """Whether an end-of-image marker lies in the last :data:`END_WINDOW` bytes after
    the scan's start (a bounded look at the tail, not a scan of the file)."""
    if end - scan < 2:
        return False
    if buffer[end - 2] == 0xFF and buffer[end - 1] == 0xD9:
        return True
    return _END in bytes(buffer[max(scan, end - END_WINDOW) : end])


#: The columns of a :func:`header_table`: :class:`JpegHeader`'s fields, in order.
FIELDS = JpegHeader._fields
HEIGHT, WIDTH, COMPONENTS, PRECISION, FRAME, ORIENTATION, ENDS = range(len(FIELDS))
_NO_HEADER = (0,) * len(FIELDS)


def header_table(buffer: bytes | memoryview, offsets: Sequence[int]) -> np.ndarray:
    """The headers of the images ``buffer[offsets[i]:offsets[i + 1]]``, as one (N, 7)
    int64 array whose columns are :data:`FIELDS`; a row of zeros where
    :func:`read_jpeg_header` gives None (no height: nothing takes it but OpenCV).

    Example:
        >>> import cv2, numpy as np
        >>> ok, data = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
        >>> header_table(data.tobytes() + b"not a JPEG", [0, data.size, data.size + 10])
        array([[ 48,  64,   3,   8, 192,   1,   1],
               [  0,   0,   0,   0,   0,   0,   0]])
    """
    return header_rows(
        read_jpeg_header(buffer, start, stop) for start, stop in itertools.pairwise(offsets)
    )


def header_rows(headers: Iterable[JpegHeader | None]) -> np.ndarray:
    """``headers`` as a :func:`header_table` (a row of zeros for None)."""
    table = [_NO_HEADER if header is None else header for header in headers]
    return np.array(table, dtype=np.int64).reshape(len(table), len(FIELDS))
