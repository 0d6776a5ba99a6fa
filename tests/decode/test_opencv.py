from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from exif_images import exif_images
from fastload.decode import opencv as decode
from fastload.decode.opencv import (
    ImageDecodeError,
    decode_image,
    decoded_size,
    displayed_size,
    load_image,
    read_image,
    reduction_factor,
)


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


@pytest.fixture(scope="module")
def photo_jpeg(tmp_path_factory) -> Path:
    from fastload import make_image_folder

    root = make_image_folder(
        tmp_path_factory.mktemp("photos"), num_classes=1, images_per_class=1, size=(640, 480)
    )
    return next(root.rglob("*.jpg"))


def test_pixels_equal_cv2_imread_and_are_close_to_pil(photo_jpeg):
    image = read_image(photo_jpeg)
    assert np.array_equal(image, cv2.cvtColor(cv2.imread(str(photo_jpeg)), cv2.COLOR_BGR2RGB))
    with Image.open(photo_jpeg) as pil:
        reference = np.asarray(pil.convert("RGB")).astype(int)
    # Two libjpeg builds may round the IDCT and upsampling differently: a few levels.
    difference = np.abs(image.astype(int) - reference)
    assert difference.mean() < 1.0 and difference.max() <= 16


@pytest.mark.parametrize(
    ("min_size", "factor"),
    [(None, 1), (480, 1), (241, 1), (240, 2), (120, 4), (60, 8), (1, 8), ((200, 300), 2)],
)
def test_reduced_decode_keeps_at_least_min_size(photo_jpeg, min_size, factor):
    image = read_image(photo_jpeg, min_size=min_size)
    assert image.shape == (480 // factor, 640 // factor, 3)
    if factor > 1:
        flag = {
            2: cv2.IMREAD_REDUCED_COLOR_2,
            4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8,
        }[factor]
        assert np.array_equal(
            image, cv2.cvtColor(cv2.imread(str(photo_jpeg), flag), cv2.COLOR_BGR2RGB)
        )


@given(
    height=st.integers(1, 5000),
    width=st.integers(1, 5000),
    min_h=st.integers(1, 1000),
    min_w=st.integers(1, 1000),
)
def test_reduction_factor_never_goes_below_min_size_and_is_the_largest(height, width, min_h, min_w):
    factor = reduction_factor(height, width, (min_h, min_w))
    assert factor in (1, 2, 4, 8)
    if factor > 1:
        assert -(-height // factor) >= min_h and -(-width // factor) >= min_w
    larger = {1: 2, 2: 4, 4: 8}.get(factor)
    if larger is not None:
        assert -(-height // larger) < min_h or -(-width // larger) < min_w


def test_reduced_decode_does_not_apply_to_png():
    data = encode(photo(64, 64), ".png")
    assert decode_image(data, min_size=8).shape == (64, 64, 3)


@pytest.mark.parametrize("decode", ["numpy", "tensor", None])
def test_load_image_modes(decode):
    data = encode(photo(), ".png")
    out = load_image(data, decode, source="x")
    if decode == "numpy":
        assert isinstance(out, np.ndarray) and out.shape == (24, 32, 3)
    elif decode == "tensor":
        assert out.shape == (3, 24, 32) and torch.equal(
            out.permute(1, 2, 0), torch.from_numpy(photo())
        )
    else:
        assert out.dtype == torch.uint8 and bytes(out.numpy()) == data


def _jpeg_declaring(width: int, height: int) -> bytes:
    """A tiny JPEG whose header claims ``width`` x ``height``: a decompression bomb."""
    out = io.BytesIO()
    Image.new("RGB", (16, 16)).save(out, "JPEG")
    data = bytearray(out.getvalue())
    start = data.find(b"\xff\xc0")  # baseline frame header: height, then width
    data[start + 5 : start + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


@pytest.mark.parametrize("min_size", [None, 224])
def test_a_decompression_bomb_is_refused_before_decoding(min_size):
    bomb = _jpeg_declaring(20000, 20000)
    assert len(bomb) < 1000
    with pytest.raises(ImageDecodeError, match=r"bomb.jpg: 20000x20000 is 400,000,000 pixels"):
        decode_image(bomb, source="bomb.jpg", min_size=min_size)


def test_the_pixel_limit_is_configurable(monkeypatch):
    monkeypatch.setattr(decode, "MAX_PIXELS", 100)
    with pytest.raises(ImageDecodeError, match="over the limit of 100"):
        decode_image(_jpeg_declaring(11, 10), source="small.jpg")
    monkeypatch.setattr(decode, "MAX_PIXELS", None)
    # Past OpenCV's own limit (2**30 pixels): its refusal is an ImageDecodeError too.
    with pytest.raises(ImageDecodeError, match=r"huge.jpg: OpenCV refused it"):
        decode_image(_jpeg_declaring(65000, 65000), source="huge.jpg")


@pytest.mark.parametrize("orientation", [6, 8])
def test_reduced_decode_of_an_exif_rotated_jpeg_keeps_min_size(orientation):
    pixels = np.random.default_rng(0).integers(0, 256, (400, 1000, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation  # rotated by 90 degrees: displayed 400 wide, 1000 high
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", exif=exif.tobytes())
    full = decode_image(out.getvalue())
    assert full.shape == (1000, 400, 3)
    assert decode_image(out.getvalue(), min_size=(480, 200)).shape == (500, 200, 3)  # 1/2
    assert decode_image(out.getvalue(), min_size=(600, 100)).shape == (1000, 400, 3)
    # On the stored (unrotated) 400 x 1000 this would have looked halvable.
    assert decode_image(out.getvalue(), min_size=(200, 480)).shape == (1000, 400, 3)


@given(image=exif_images())
def test_the_size_of_an_encoded_image_is_its_decodes(image):
    form, data = image
    shown = decode_image(data).shape[:2]
    assert decoded_size(torch.from_numpy(data), "image.x") == shown
    # a JPEG's from its header; another format's orientation is not read from its header
    assert displayed_size(data) == (shown if form == "jpeg" else None)
