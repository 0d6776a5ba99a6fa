"""CPU image decoding with OpenCV: encoded bytes to HWC uint8 RGB, fastload's one decode path."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
import torch

from fastload.jpeg import SOI, jpeg_header

__all__ = [
    "MAX_PIXELS",
    "DecodeMode",
    "ImageDecodeError",
    "as_output",
    "check_decode_mode",
    "check_min_size",
    "decode_image",
    "decoded_size",
    "displayed_size",
    "is_jpeg",
    "load_image",
    "read_image",
    "reduction_factor",
]

#: What a dataset returns for an image: "numpy" HWC uint8 RGB, "tensor" CHW uint8, or
#: None for the encoded bytes as a 1-D uint8 tensor (decoded later, on the GPU).
DecodeMode = Literal["numpy", "tensor"] | None

# OpenCV >= 4.10 can decode straight to RGB (not combined with the reduced modes).
_FULL_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)
# libjpeg decodes at 1/2, 1/4, 1/8 scale in the DCT: less work, no resize needed.
_REDUCED = {
    2: cv2.IMREAD_REDUCED_COLOR_2,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    8: cv2.IMREAD_REDUCED_COLOR_8,
}

# OpenCV 5 rejects a truncated JPEG; 4.x fills the missing part with grey and only
# prints a warning, so there we look for the end marker ourselves.
_CHECK_JPEG_END = int(cv2.__version__.split(".")[0]) < 5
_JPEG_SCAN = b"\xff\xda"
_JPEG_END = b"\xff\xd9"


#: Images whose header declares more pixels than this are refused before decoding: a
#: few hundred bytes can declare 20000x20000 and take gigabytes to decode (a
#: "decompression bomb"). PIL's limit; set it higher, or None to turn the check off,
#: before the loader starts: fastload's datasets carry it into their workers, spawned
#: ones too (:class:`~fastload.datasets.base.ImageDataset`).
MAX_PIXELS: int | None = 178_956_970


class ImageDecodeError(ValueError):
    """Bytes that are not a complete image in a format OpenCV reads."""


def is_jpeg(data: bytes | memoryview | np.ndarray | torch.Tensor) -> bool:
    """Whether encoded ``data`` (bytes, or a 1-D uint8 array or CPU tensor) starts with
    JPEG's start-of-image marker."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        head = bytes(data[:2])
    else:
        head = np.asarray(data[:2], dtype=np.uint8).tobytes()
    return head == SOI


def is_truncated_jpeg(data: np.ndarray) -> bool:
    # A complete JPEG has an end marker after its last scan (an EXIF thumbnail's end
    # marker comes before the main image's scans).
    raw = data.tobytes()
    return raw.rfind(_JPEG_END) < raw.rfind(_JPEG_SCAN)


def _min_hw(min_size: int | tuple[int, int]) -> tuple[int, int]:
    return (min_size, min_size) if isinstance(min_size, int) else min_size


def check_min_size(min_size: object) -> int | tuple[int, int] | None:
    """``min_size`` if it is None, an int >= 1 or an ``(h, w)`` pair of them; a ValueError
    naming it otherwise (a size of 0 would let every JPEG decode at 1/8 of its size).

    Example:
        >>> check_min_size((224, 160))
        (224, 160)
        >>> check_min_size(0)
        Traceback (most recent call last):
        ...
        ValueError: min_size must be None, an int >= 1 or an (h, w) pair of them, got 0
    """
    if min_size is None:
        return None
    if isinstance(min_size, (int, np.integer)) and _is_side(min_size):
        return int(min_size)
    if isinstance(min_size, (tuple, list)) and len(min_size) == 2 and all(map(_is_side, min_size)):
        return int(min_size[0]), int(min_size[1])
    raise ValueError(
        f"min_size must be None, an int >= 1 or an (h, w) pair of them, got {min_size!r}"
    )


def _is_side(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and bool(value >= 1)


def reduction_factor(height: int, width: int, min_size: int | tuple[int, int] | None) -> int:
    """The largest of 8, 4, 2 (else 1) that keeps a ``height`` x ``width`` image at
    least ``min_size`` after scaling down (libjpeg rounds the scaled size up).

    ``min_size``: an int bounds both sides (so the shorter side), ``(h, w)`` each one.

    Example:
        >>> reduction_factor(1500, 2000, 224), reduction_factor(375, 500, 224)
        (4, 1)
    """
    if min_size is None:
        return 1
    min_h, min_w = _min_hw(min_size)
    for factor in (8, 4, 2):
        if -(-height // factor) >= min_h and -(-width // factor) >= min_w:
            return factor
    return 1


def displayed_size(data: np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of a JPEG as :func:`decode_image` returns it (EXIF orientation
    applied), from its header (:func:`~fastload.jpeg.jpeg_header`, which reads the
    orientation as OpenCV does), without decoding.

    None for a header it cannot read and for other formats: OpenCV turns a PNG, WebP or
    TIFF by EXIF metadata that may come after the pixels, and its versions read it
    differently, so their size as decoded is known from decoding them
    (:func:`decoded_size` does, and ``DecodeRandomResizedCrop`` draws their box after).
    """
    header = jpeg_header(data) if is_jpeg(data) else None
    return None if header is None else header.displayed


def _declared_size(data: np.ndarray, source: str) -> tuple[int, int] | None:
    """The ``(height, width)`` a header declares, for the pixel limit: a JPEG's as shown,
    another format's as stored (PIL reads it; turned or not, the count is the same); None
    when the header is unreadable (the decode then reports it).

    Raises:
        ImageDecodeError: PIL's own limit refuses it (and :data:`MAX_PIXELS` is set).
    """
    if is_jpeg(data):
        return displayed_size(data)
    from PIL import Image  # reads the header only, no pixels

    try:
        with Image.open(io.BytesIO(data[:65536].tobytes())) as other:
            width, height = other.size
    except Image.DecompressionBombError as error:
        if MAX_PIXELS is None:
            return None
        raise ImageDecodeError(f"{source}: {error}") from error
    except Exception:
        return None
    return height, width


def decode_image(
    data: bytes | memoryview | np.ndarray,
    *,
    source: str = "<bytes>",
    min_size: int | tuple[int, int] | None = None,
) -> np.ndarray:
    """Decode JPEG, PNG, BMP, WebP (whatever this OpenCV reads) to HWC uint8 RGB.

    Grayscale becomes 3 channels and alpha is dropped, so every image has shape
    ``(H, W, 3)``.

    Args:
        data: The encoded file's bytes.
        source: Names the image in errors (a path, a database key).
        min_size: The smallest image the pipeline needs (an int for both sides, or
            ``(h, w)``). A JPEG at least twice that size is decoded at 1/2, 1/4 or 1/8
            scale inside the decoder, which is faster and loses no needed resolution;
            other images are decoded at full size.

    Raises:
        ImageDecodeError: Empty, truncated, corrupt or not an image, or over
            :data:`MAX_PIXELS`; names ``source``.
        ValueError: ``min_size`` is not an int >= 1 or a pair of them.

    Example:
        >>> ok, png = cv2.imencode(".png", np.zeros((2, 3), np.uint8))
        >>> decode_image(png.tobytes()).shape
        (2, 3, 3)
    """
    min_size = check_min_size(min_size)
    buffer = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if buffer.size == 0:
        raise ImageDecodeError(f"{source}: empty, no image data")
    jpeg = is_jpeg(buffer)
    size = _declared_size(buffer, source)
    if size is not None and MAX_PIXELS is not None and size[0] * size[1] > MAX_PIXELS:
        raise ImageDecodeError(
            f"{source}: {size[1]}x{size[0]} is {size[0] * size[1]:,} pixels, over the limit of "
            f"{MAX_PIXELS:,} (a decompression bomb?); raise "
            "fastload.decode.opencv.MAX_PIXELS to allow it (before the loader starts: "
            "fastload's datasets carry it into their workers)"
        )
    factor = reduction_factor(*size, min_size) if jpeg and size is not None else 1
    if factor > 1:
        flag, bgr = _REDUCED[factor], True
    else:
        flag, bgr = (cv2.IMREAD_COLOR, True) if _FULL_RGB is None else (_FULL_RGB, False)
    try:
        image = cv2.imdecode(buffer, flag)
    except cv2.error as error:  # e.g. over OpenCV's own pixel limit
        reason = str(error).strip().splitlines()[-1]
        raise ImageDecodeError(f"{source}: OpenCV refused it: {reason}") from error
    if image is None:
        raise ImageDecodeError(
            f"{source}: not an image OpenCV can decode (corrupt or unknown format)"
        )
    if _CHECK_JPEG_END and jpeg and is_truncated_jpeg(buffer):
        raise ImageDecodeError(f"{source}: truncated JPEG (no end marker after the last scan)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB) if bgr else image


def read_image(path: str | Path, *, min_size: int | tuple[int, int] | None = None) -> np.ndarray:
    """Read and decode one image file to HWC uint8 RGB; errors name the file."""
    return decode_image(Path(path).read_bytes(), source=str(path), min_size=min_size)


def check_decode_mode(decode: Any) -> None:
    if decode not in ("numpy", "tensor", None):
        raise ValueError(f"decode must be 'numpy', 'tensor' or None, got {decode!r}")


def as_output(image: np.ndarray, decode: DecodeMode) -> np.ndarray | torch.Tensor:
    """An HWC array as ``decode`` asks: the array itself, or a CHW tensor view of it."""
    if decode != "tensor":
        return image
    tensor = torch.from_numpy(image)
    return tensor.permute(2, 0, 1) if tensor.dim() == 3 else tensor


def load_image(
    data: bytes | memoryview,
    decode: DecodeMode,
    *,
    source: str,
    min_size: int | tuple[int, int] | None = None,
) -> np.ndarray | torch.Tensor:
    """Encoded bytes to what a dataset returns for ``decode`` (see :data:`DecodeMode`).

    The bytes are copied (``decode=None``) or decoded before this returns, so ``data``
    may be a view into a memory map.
    """
    if decode is None:
        return torch.from_numpy(np.frombuffer(data, np.uint8).copy())
    return as_output(decode_image(data, source=source, min_size=min_size), decode)


def decoded_size(image: Any, source: str) -> tuple[int, int]:
    """(height, width) of a decoded image (HWC array, CHW tensor) or of encoded bytes, as
    :func:`decode_image` returns them: a JPEG's from its header, another format's (or a
    JPEG whose header is unreadable) by decoding it (see :func:`displayed_size`).

    Raises:
        ImageDecodeError: Encoded bytes that do not decode; names ``source``.
    """
    if isinstance(image, np.ndarray):
        return image.shape[0], image.shape[1]
    if image.ndim == 3:
        return image.shape[-2], image.shape[-1]
    encoded = image.numpy()
    size = displayed_size(encoded)
    if size is None:
        height, width = decode_image(encoded, source=source).shape[:2]
        return height, width
    return size
