"""The JPEG header, read once per image without decoding or copying the file: sizes,
components, coding, EXIF orientation, and whether the file ends with its end marker.

:func:`read_jpeg_header` walks the marker segments from the start of image to the start
of scan (SOI, APPn, DQT, DHT, SOF, ... SOS) on a view of the encoded bytes, reading only
the few bytes each segment's length and the frame header need, and each EXIF block's
first directory (IFD0) for the orientation tag, read as OpenCV reads it (see
:class:`JpegHeader`), so that the size shown is the size OpenCV decodes. Hostile bytes
give None, never an exception: every length is checked against the file and the walk is
bounded, so a caller sends such a file to OpenCV, whose decode names what is wrong with
it.

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
_ENTRIES = {0x49: struct.Struct("<HHII").iter_unpack, 0x4D: struct.Struct(">HHII").iter_unpack}
# tag 0x0112 (Orientation) as IFD0 stores it, by byte order ("II": little endian)
_ORIENTATION_TAG = {0x49: b"\x12\x01", 0x4D: b"\x01\x12"}
# The IFD0 tags whose data OpenCV reads, which may lie past the block: an error that ends
# its reading of the block, so an orientation after one is not read. Text (description,
# make, model, software, date, copyright), and rationals, with how many each has
_TEXT_TAGS = frozenset({0x010E, 0x010F, 0x0110, 0x0131, 0x0132, 0x8298})
_RATIONAL_TAGS = {0x011A: 1, 0x011B: 1, 0x013E: 2, 0x013F: 6, 0x0211: 3, 0x0214: 6}
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
    EXIF ``orientation`` (1 to 8, 1 where the file has none), as OpenCV returns the image.
    The orientation is OpenCV's reading of it (its ``ExifReader``; the tests check this
    against OpenCV's decode): the first EXIF block (APP1 segment) whose IFD0 holds the
    tag, with no entry before it whose data lies past the block, decides; its value is the
    first two bytes of the entry's value field, in the block's byte order, whatever the
    type says (a LONG in big-endian order reads as 0); a value outside 1 to 8 is none.
    ``orientation_tags`` counts the EXIF blocks that hold the tag: nvImageCodec, which
    reads the last of them, shows an image with more than one as OpenCV does only by
    chance, so it is not given one (:func:`fastload.decode.inputs.accelerated`).
    ``frame`` is the frame header's marker (0xC0 baseline, 0xC1 extended, 0xC2
    progressive, others for lossless or arithmetic coding); ``ends``: an end-of-image
    marker within the last :data:`END_WINDOW` bytes.
    """

    height: int
    width: int
    components: int
    precision: int
    frame: int
    orientation: int
    ends: bool
    orientation_tags: int

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
    pos, frame, orientation, tags = start + 2, None, None, 0
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
        elif kind == _APP1 and length >= 16:
            found = _exif_orientation(buffer, pos + 4, after)
            if found is not None:
                tags += 1
                orientation = found if orientation is None else orientation  # the first
        elif kind == _SCAN:
            if frame is None:
                return None
            return JpegHeader(*frame, orientation or 1, _ends(buffer, after, end), tags)
        pos = after
    return None


def _exif_orientation(buffer: bytes | memoryview, begin: int, end: int) -> int | None:
    """The orientation of the EXIF block in an APP1 segment's ``buffer[begin:end]`` as
    OpenCV reads it (see :class:`JpegHeader`; 1 for a value outside 1 to 8), or None
    where OpenCV gets none from it: not EXIF (XMP), not TIFF, no orientation tag in IFD0
    within the block, or an entry before the tag whose data lies past the block."""
    if tuple(buffer[begin : begin + 6]) != _EXIF_BYTES:
        return None  # an APP1 of another kind (XMP)
    tiff = begin + 6
    # OpenCV: little endian where the block starts "II", big endian otherwise
    order = 0x49 if buffer[tiff] == buffer[tiff + 1] == 0x49 else 0x4D
    magic, offset = _TIFF[order](buffer, tiff + 2)
    entries = tiff + offset + 2
    if magic != 42 or entries > end:
        return None
    (count,) = _SHORT[order](buffer, entries - 2)
    stop = min(entries + 12 * count, end)
    # IFD0's entries are 12 bytes each (tag, type, count, value): find the tag's bytes at
    # an entry's start, in one bounded search of the directory
    table = bytes(buffer[entries:stop])
    tag, at = _ORIENTATION_TAG[order], 0
    while True:  # each turn moves on by one entry at least
        at = table.find(tag, at)
        if at < 0 or at + 10 > len(table):  # OpenCV reads 2 bytes of the value field
            return None
        if at % 12 == 0:
            break
        at += 12 - at % 12
    if at and not _readable(table[:at], order, end - tiff):
        return None
    # OpenCV reads the value field's first two bytes whatever the type and count: a
    # SHORT's value (left-justified), a little-endian LONG's low half, a big-endian one's
    # high half (0: none)
    (value,) = _SHORT[order](table, at + 8)
    return int(value) if 1 <= value <= 8 else 1


def _readable(entries: bytes, order: int, size: int) -> bool:
    """Whether OpenCV reads the IFD ``entries`` of an EXIF block of ``size`` bytes without
    an error: the data of each text or rational tag within the block."""
    for tag, _, count, value in _ENTRIES[order](entries):
        if tag in _TEXT_TAGS:  # up to 4 bytes in the entry (OpenCV bounds them by 8)
            if (8 if count <= 4 else value) + count > size:
                return False
        elif tag in _RATIONAL_TAGS and value + 8 * _RATIONAL_TAGS[tag] > size:
            return False
    return True


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
HEIGHT, WIDTH, COMPONENTS, PRECISION, FRAME, ORIENTATION, ENDS, ORIENTATION_TAGS = range(
    len(FIELDS)
)
_NO_HEADER = (0,) * len(FIELDS)


def header_table(buffer: bytes | memoryview, offsets: Sequence[int]) -> np.ndarray:
    """The headers of the images ``buffer[offsets[i]:offsets[i + 1]]``, as one (N, 8)
    int64 array whose columns are :data:`FIELDS`; a row of zeros where
    :func:`read_jpeg_header` gives None (no height: nothing takes it but OpenCV).

    Example:
        >>> import cv2, numpy as np
        >>> ok, data = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
        >>> header_table(data.tobytes() + b"not a JPEG", [0, data.size, data.size + 10])
        array([[ 48,  64,   3,   8, 192,   1,   1,   0],
               [  0,   0,   0,   0,   0,   0,   0,   0]])
    """
    return header_rows(
        read_jpeg_header(buffer, start, stop) for start, stop in itertools.pairwise(offsets)
    )


def header_rows(headers: Iterable[JpegHeader | None]) -> np.ndarray:
    """``headers`` as a :func:`header_table` (a row of zeros for None)."""
    table = [_NO_HEADER if header is None else header for header in headers]
    return np.array(table, dtype=np.int64).reshape(len(table), len(FIELDS))
