"""CPU image decoding with OpenCV: encoded bytes to HWC uint8 RGB, fastload's one decode path."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

__all__ = ["ImageDecodeError", "decode_image", "read_image"]

# OpenCV 5 rejects a truncated JPEG; 4.x fills the missing part with grey and only
# prints a warning, so there we look for the end marker ourselves.
_CHECK_JPEG_END = int(cv2.__version__.split(".")[0]) < 5
_JPEG_START = b"\xff\xd8"
_JPEG_SCAN = b"\xff\xda"
_JPEG_END = b"\xff\xd9"


class ImageDecodeError(ValueError):
    """Bytes that are not a complete image in a format OpenCV reads."""


def _truncated_jpeg(data: np.ndarray) -> bool:
    # A complete JPEG has an end marker after its last scan (an EXIF thumbnail's end
    # marker comes before the main image's scans).
    raw = data.tobytes()
    return raw.rfind(_JPEG_END) < raw.rfind(_JPEG_SCAN)


def decode_image(data: bytes | memoryview | np.ndarray, *, source: str = "<bytes>") -> np.ndarray:
    """Decode JPEG, PNG, BMP, WebP (whatever this OpenCV reads) to HWC uint8 RGB.

    Grayscale becomes 3 channels and alpha is dropped, so every image has shape
    ``(H, W, 3)``.

    Args:
        data: The encoded file's bytes.
        source: Names the image in errors (a path, a database key).

    Raises:
        ImageDecodeError: Empty, truncated, corrupt or not an image; names ``source``.

    Example:
        >>> ok, png = cv2.imencode(".png", np.zeros((2, 3), np.uint8))
        >>> decode_image(png.tobytes()).shape
        (2, 3, 3)
    """
    buffer = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if buffer.size == 0:
        raise ImageDecodeError(f"{source}: empty, no image data")
    image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    if image is None:
        raise ImageDecodeError(
            f"{source}: not an image OpenCV can decode (corrupt or unknown format)"
        )
    if _CHECK_JPEG_END and buffer[:2].tobytes() == _JPEG_START and _truncated_jpeg(buffer):
        raise ImageDecodeError(f"{source}: truncated JPEG (no end marker after the last scan)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def read_image(path: str | Path) -> np.ndarray:
    """Read and decode one image file to HWC uint8 RGB; errors name the file."""
    return decode_image(Path(path).read_bytes(), source=str(path))
