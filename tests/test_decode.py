from __future__ import annotations

import cv2
import numpy as np
import pytest

from fastload.decode import ImageDecodeError, decode_image, read_image


def photo(height: int = 24, width: int = 32) -> np.ndarray:
    """A smooth RGB image: lossy codecs keep it close."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [x * 255 // width, y * 255 // height, (x + y) * 255 // (height + width)], -1
    ).astype(np.uint8)


def encode(rgb: np.ndarray, extension: str) -> bytes:
    image = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.ndim == 3 else rgb
    ok, data = cv2.imencode(extension, image)
    assert ok
    return data.tobytes()


@pytest.mark.parametrize(
    ("extension", "tolerance"), [(".png", 0), (".bmp", 0), (".jpg", 12), (".webp", 12)]
)
def test_formats_decode_to_hwc_uint8_rgb(extension, tolerance):
    rgb = photo()
    image = decode_image(encode(rgb, extension))
    assert image.shape == (24, 32, 3) and image.dtype == np.uint8
    assert np.abs(image.astype(int) - rgb).max() <= tolerance


def test_grayscale_becomes_three_channels():
    gray = photo()[:, :, 0]
    image = decode_image(encode(gray, ".png"))
    assert image.shape == (24, 32, 3)
    assert all(np.array_equal(image[:, :, c], gray) for c in range(3))


def test_alpha_is_dropped():
    rgba = np.dstack([photo(), np.full((24, 32), 7, np.uint8)])
    _, data = cv2.imencode(".png", cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
    image = decode_image(data.tobytes())
    assert image.shape == (24, 32, 3) and np.array_equal(image, photo())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "cat.jpg: empty, no image data"),
        (b"plain text, not an image", "cat.jpg: not an image OpenCV can decode"),
        (encode(photo(), ".jpg")[:300], "cat.jpg: (not an image OpenCV can decode|truncated JPEG)"),
        (encode(photo(), ".png")[:100], "cat.jpg: not an image OpenCV can decode"),
    ],
    ids=["empty", "text", "truncated-jpeg", "truncated-png"],
)
def test_bad_bytes_raise_an_error_naming_the_source(data, message):
    with pytest.raises(ImageDecodeError, match=message):
        decode_image(data, source="cat.jpg")


def test_read_image(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(encode(photo(), ".png"))
    assert np.array_equal(read_image(path), photo())
    with pytest.raises(FileNotFoundError, match=r"missing\.jpg"):
        read_image(tmp_path / "missing.jpg")
