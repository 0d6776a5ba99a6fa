"""Images that carry an EXIF orientation in the ways files in the wild do, written byte by
byte: the tag as a SHORT or a LONG, in either byte order, after another tag, in one EXIF
block or two; in a JPEG (APP1 segments), a PNG (eXIf chunks) or a WebP (its EXIF chunk).
The tests of every reader of image sizes take them from :func:`exif_images`."""

from __future__ import annotations

import dataclasses
import io
import struct
import zlib
from collections.abc import Sequence

import cv2
import numpy as np
from hypothesis import strategies as st
from PIL import Image

MAKE, ORIENTATION = 0x010F, 0x0112
SHORT, LONG = 3, 4
FORMATS = ("jpeg", "png", "webp")


@dataclasses.dataclass(frozen=True)
class Exif:
    """One EXIF block: its IFD0 holds a Make tag, then the orientation tag (none where
    ``orientation`` is None) of type ``kind`` (SHORT or LONG), in byte order ``order``
    ("<": "II", little endian; ">": "MM")."""

    orientation: int | None
    order: str = "<"
    kind: int = SHORT

    def tiff(self) -> bytes:
        """The block as TIFF: header, IFD0, no next directory."""
        o = self.order
        entries = [struct.pack(o + "HHI", MAKE, 2, 4) + b"cam\x00"]  # ASCII, 4 bytes, inline
        if self.orientation is not None:
            value = (
                struct.pack(o + "HH", self.orientation, 0)  # left-justified in the field
                if self.kind == SHORT
                else struct.pack(o + "I", self.orientation)
            )
            entries.append(struct.pack(o + "HHI", ORIENTATION, self.kind, 1) + value)
        header = (b"II" if o == "<" else b"MM") + struct.pack(o + "HI", 42, 8)
        directory = struct.pack(o + "H", len(entries)) + b"".join(entries)
        return header + directory + struct.pack(o + "I", 0)


def smooth_rgb(height: int, width: int, seed: int = 0) -> np.ndarray:
    """An HWC uint8 RGB image with no two corners alike (an orientation shows), smooth
    enough that lossy coding and reduced-scale decoding change it little."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)


def jpeg_with(rgb: np.ndarray, blocks: Sequence[Exif]) -> bytes:
    """A JPEG of ``rgb`` with one APP1 segment per block, after OpenCV's JFIF segment."""
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    raw = data.tobytes()
    jfif_end = 4 + struct.unpack(">H", raw[4:6])[0]  # SOI, then APP0's marker and length
    segments = b"".join(
        b"\xff\xe1" + struct.pack(">H", 8 + len(tiff)) + b"Exif\x00\x00" + tiff
        for tiff in (block.tiff() for block in blocks)
    )
    return raw[:jfif_end] + segments + raw[jfif_end:]


def png_with(rgb: np.ndarray, blocks: Sequence[Exif]) -> bytes:
    """A PNG of ``rgb`` with one eXIf chunk (raw TIFF, as the PNG spec has it) per block,
    before the image data."""
    ok, data = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    raw = data.tobytes()
    after_header = 8 + 12 + struct.unpack(">I", raw[8:12])[0]  # signature, then IHDR
    chunks = b"".join(
        struct.pack(">I", len(tiff))
        + b"eXIf"
        + tiff
        + struct.pack(">I", zlib.crc32(b"eXIf" + tiff))
        for tiff in (block.tiff() for block in blocks)
    )
    return raw[:after_header] + chunks + raw[after_header:]


def webp_with(rgb: np.ndarray, blocks: Sequence[Exif]) -> bytes:
    """A lossless WebP of ``rgb`` with the first block in its EXIF chunk (PIL writes one)."""
    buffer = io.BytesIO()
    exif = b"Exif\x00\x00" + blocks[0].tiff() if blocks else b""
    Image.fromarray(rgb).save(buffer, "WEBP", lossless=True, exif=exif)
    return buffer.getvalue()


WRITERS = {"jpeg": jpeg_with, "png": png_with, "webp": webp_with}


def encoded(form: str, rgb: np.ndarray, blocks: Sequence[Exif]) -> np.ndarray:
    """``rgb`` encoded as ``form`` with ``blocks``, as a 1-D uint8 array."""
    return np.frombuffer(WRITERS[form](rgb, blocks), np.uint8).copy()  # writable, as torch wants


exif_blocks = st.builds(
    Exif,
    orientation=st.sampled_from([None, *range(1, 9)]),
    order=st.sampled_from(["<", ">"]),
    kind=st.sampled_from([SHORT, LONG]),
)


@st.composite
def exif_images(draw: st.DrawFn, forms: Sequence[str] = FORMATS) -> tuple[str, np.ndarray]:
    """``(form, encoded bytes)`` of a non-square image, 24 to 96 pixels a side, with 0 to 2
    EXIF blocks (PNG and WebP: 1 at most, as their specifications allow)."""
    form = draw(st.sampled_from(forms))
    height = draw(st.integers(24, 96))
    width = draw(st.integers(24, 96).filter(lambda w: w != height))
    blocks = draw(st.lists(exif_blocks, max_size=2 if form == "jpeg" else 1))
    rgb = smooth_rgb(height, width, seed=draw(st.integers(0, 3)))
    return form, encoded(form, rgb, blocks)
