from __future__ import annotations

import random
import warnings

import cv2
import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from exif_images import LONG, Exif, encoded, exif_images, smooth_rgb
from fastload.decode.opencv import decode_image
from fastload.testing.synthetic import photo_like_image
from fastload.transforms import DecodeRandomResizedCrop, RandomResizedCrop, crop_box


def image(height=48, width=64, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


# --- RandomResizedCrop ---------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 90),
    width=st.integers(1, 90),
    size=st.tuples(st.integers(1, 50), st.integers(1, 50)),
    seed=st.integers(0, 2**16),
    as_tensor=st.booleans(),
)
def test_crop_equals_torchvision_resized_crop_for_the_drawn_box(
    height, width, size, seed, as_tensor
):
    array = image(height, width, seed % 7)
    tensor = torch.from_numpy(array).permute(2, 0, 1)
    crop = RandomResizedCrop(size)
    random.seed(seed)
    box = crop_box(height, width)
    random.seed(seed)
    out = crop(tensor if as_tensor else array)
    assert out.shape == (3, *size) and out.dtype == torch.uint8
    assert torch.equal(out, TF.resized_crop(tensor, *box, list(size), antialias=True))


@given(height=st.integers(1, 3000), width=st.integers(1, 3000), seed=st.integers(0, 2**16))
def test_boxes_lie_inside_the_image(height, width, seed):
    top, left, crop_h, crop_w = crop_box(height, width, rng=random.Random(seed))
    assert top >= 0 and left >= 0
    assert top + crop_h <= height and left + crop_w <= width
    assert crop_h >= 1 and crop_w >= 1


def test_boxes_follow_torchvisions_distribution():
    """Area fraction and aspect ratio of 4000 draws against 4000 of torchvision's."""
    rng, ours, theirs = random.Random(0), [], []
    torch.manual_seed(0)
    reference = torch.empty(3, 375, 500)
    for _ in range(4000):
        ours.append(crop_box(375, 500, rng=rng)[2:])
        theirs.append(T.RandomResizedCrop.get_params(reference, (0.08, 1.0), (3 / 4, 4 / 3))[2:])
    for boxes in (ours, theirs):
        assert all(0 < h <= 375 and 0 < w <= 500 for h, w in boxes)

    def stats(boxes):
        area = np.array([h * w for h, w in boxes]) / (375 * 500)
        aspect = np.log([w / h for h, w in boxes])
        return area.mean(), np.quantile(area, [0.1, 0.5, 0.9]), aspect.mean(), aspect.std()

    (area_a, q_a, log_a, sd_a), (area_b, q_b, log_b, sd_b) = stats(ours), stats(theirs)
    # 4000 draws: the standard error of a mean area is about 0.004
    assert abs(area_a - area_b) < 0.02 and np.allclose(q_a, q_b, atol=0.03)
    assert abs(log_a - log_b) < 0.02 and abs(sd_a - sd_b) < 0.02


@pytest.mark.parametrize(
    ("height", "width", "ratio"),
    [(100, 400, (3 / 4, 4 / 3)), (400, 100, (3 / 4, 4 / 3)), (100, 110, (1.0, 1.0))],
)
def test_when_nothing_fits_the_fallback_is_torchvisions(height, width, ratio):
    # scale above 1 never fits: torchvision then takes the whole image, ratio clamped
    torch.manual_seed(0)
    want = T.RandomResizedCrop.get_params(torch.empty(3, height, width), (2.0, 3.0), ratio)
    assert crop_box(height, width, (2.0, 3.0), ratio) == tuple(want)


def test_antialias_low_passes_a_shrinking_crop():
    stripes = np.zeros((48, 48, 3), np.uint8)
    stripes[:, ::2] = 255  # one-pixel stripes, shrunk 3x: sampled without a filter, they alias
    whole = {"scale": (1.0, 1.0), "ratio": (1.0, 1.0)}
    aliased = RandomResizedCrop(16, antialias=False, **whole)(stripes).float()
    assert aliased[0, 0].tolist() == [0.0, 255.0] * 8
    smooth = RandomResizedCrop(16, **whole)(stripes).float()
    assert smooth.std() < 20 and abs(smooth.mean() - 127.5) < 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 0}, r"size must be a positive int or \(height, width\), got 0"),
        ({"size": (3, 4, 5)}, r"size must be a positive int"),
        ({"size": 8, "scale": (0.5, 0.1)}, r"scale must be \(low, high\) with 0 < low <= high"),
        ({"size": 8, "ratio": (0.0, 1.0)}, r"ratio must be \(low, high\)"),
        ({"size": 8, "scale": (0.1, float("nan"))}, r"scale must be"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RandomResizedCrop(**kwargs)


def test_a_batch_instead_of_an_image_is_refused():
    with pytest.raises(ValueError, match=r"one HWC array or CHW tensor, got shape \(2, 3, 8, 8\)"):
        RandomResizedCrop(4)(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))


# --- RandomResizedCrop on encoded images: decoded at the scale the crop needs -------------------


def jpeg(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth photo-like JPEG (smooth, so reduced-scale decoding changes little)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    ok, data = cv2.imencode(".jpg", cv2.resize(small, (width, height)))
    assert ok
    return data.ravel()


@pytest.mark.parametrize("as_bytes", [False, True])
def test_encoded_input_where_no_reduction_helps_equals_decoding_first(as_bytes):
    encoded = jpeg(120, 160)
    crop = RandomResizedCrop((100, 90))  # any box of this image is under 2x the output
    for seed in range(5):
        random.seed(seed)
        from_bytes = crop(encoded.tobytes() if as_bytes else torch.from_numpy(encoded))
        random.seed(seed)
        assert torch.equal(from_bytes, crop(decode_image(encoded)))


def test_encoded_input_is_decoded_at_the_scale_the_box_allows(monkeypatch):
    import fastload.transforms as transforms

    decoded_shapes = []

    def spy(data, **kwargs):
        image = decode_image(data, **kwargs)
        decoded_shapes.append(image.shape[:2])
        return image

    monkeypatch.setattr(transforms, "decode_image", spy)
    encoded = jpeg(1200, 1600)
    whole = {"scale": (1.0, 1.0), "ratio": (4 / 3, 4 / 3)}  # the box is the whole image
    out = RandomResizedCrop(140, **whole)(torch.from_numpy(encoded))
    assert decoded_shapes == [(150, 200)]  # 1/8: 150 px still covers 140
    full = RandomResizedCrop(140, **whole)(decode_image(encoded))
    assert out.shape == full.shape == (3, 140, 140)
    assert (out.float() - full.float()).abs().mean() < 3
    RandomResizedCrop(400, **whole)(torch.from_numpy(encoded))
    assert decoded_shapes[-1] == (600, 800)  # 1/2: 1/4 would leave 300 px for 400


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(8, 120))
def test_encoded_crops_stay_close_to_the_full_decode(seed, size):
    encoded = jpeg(480, 640, seed % 5)
    crop = RandomResizedCrop(size)
    random.seed(seed)
    reduced = crop(torch.from_numpy(encoded))
    random.seed(seed)
    full = crop(decode_image(encoded))
    assert reduced.shape == full.shape == (3, size, size)
    assert (reduced.float() - full.float()).abs().mean() < 6


@settings(max_examples=60, deadline=None)
@given(image=exif_images(), seed=st.integers(0, 2**16))
def test_an_encoded_image_is_cropped_as_its_decode_shows_it(image, seed):
    # 64 px from at most 96: no reduced scale applies, so the crop of the bytes is the
    # crop of the decode for the same draw, pixel for pixel; a box drawn for the image
    # turned otherwise than decoded would be a strip stretched to fit
    data = image[1]
    crop = RandomResizedCrop(64)
    random.seed(seed)
    from_bytes = crop(torch.from_numpy(data))
    random.seed(seed)
    assert torch.equal(from_bytes, crop(decode_image(data)))


TURNED = {
    "JPEG, LONG": ("jpeg", [Exif(6, "<", LONG)]),
    "JPEG, LONG big endian": ("jpeg", [Exif(8, ">", LONG)]),
    "JPEG, two blocks": ("jpeg", [Exif(1), Exif(6)]),
    "PNG": ("png", [Exif(6)]),
    "WebP": ("webp", [Exif(8)]),
}


@pytest.mark.parametrize(("form", "blocks"), TURNED.values(), ids=TURNED)
def test_a_large_image_turned_by_exif_is_cropped_as_its_decode_shows_it(form, blocks):
    data = encoded(form, smooth_rgb(480, 640), blocks)
    crop = RandomResizedCrop(48)  # JPEG: most boxes decode at a reduced scale
    for seed in range(6):
        random.seed(seed)
        from_bytes = crop(torch.from_numpy(data))
        random.seed(seed)
        from_pixels = crop(decode_image(data))
        error = (from_bytes.float() - from_pixels.float()).abs().mean().item()
        assert error < 3 if form == "jpeg" else error == 0, (seed, error)


def zero_height(data: np.ndarray) -> bytes:
    """``data`` with its frame header saying a height of 0 (JPEG leaves the height to a
    DNL marker then, which libjpeg does not read)."""
    raw = bytearray(data.tobytes())
    frame = raw.index(b"\xff\xc0")
    raw[frame + 5 : frame + 7] = b"\x00\x00"  # after the marker, the length, the precision
    return bytes(raw)


def test_a_jpeg_whose_frame_says_height_0_is_the_decoders_refusal_naming_the_file(tmp_path):
    from fastload import ImageFolder
    from fastload.decode.opencv import ImageDecodeError

    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "flat.jpg").write_bytes(zero_height(jpeg(40, 60)))
    dataset = ImageFolder(tmp_path, decode=None, transform=RandomResizedCrop(8))
    with pytest.raises(ImageDecodeError, match="not an image OpenCV can decode") as caught:
        dataset[0]
    assert caught.value.__notes__ == [f"in the transform of {tmp_path / 'cats' / 'flat.jpg'}"]


@pytest.mark.parametrize("height, width", [(0, 10), (10, 0), (-1, 5)])
def test_a_box_is_refused_for_an_image_of_no_pixels(height, width):
    message = rf"the image is {height}x{width} pixels \(height x width\): no box fits in it"
    with pytest.raises(ValueError, match=message):
        crop_box(height, width)
    with pytest.raises(ValueError, match=r"the image is 0x5 pixels"):
        RandomResizedCrop(4)(np.zeros((0, 5, 3), np.uint8))


def test_a_corrupt_encoded_image_is_named_by_the_dataset(tmp_path):
    from fastload import ImageFolder
    from fastload.decode.opencv import ImageDecodeError

    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "bad.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    dataset = ImageFolder(tmp_path, decode=None, transform=RandomResizedCrop(8))
    with pytest.raises(ImageDecodeError, match="not an image OpenCV can decode") as caught:
        dataset[0]
    assert caught.value.__notes__ == [f"in the transform of {tmp_path / 'cats' / 'bad.jpg'}"]


def test_without_a_reduced_scale_only_the_box_is_decoded_with_the_same_pixels(monkeypatch):
    from fastload import transforms as transforms_module
    from fastload.decode import nvimgcodec

    if not nvimgcodec.available():
        pytest.skip("needs NVIDIA nvImageCodec: pip install '.[nvimgcodec]'")
    bgr = photo_like_image(np.random.default_rng(5), 375, 500)
    data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].reshape(-1)
    regions = []
    decode_region = transforms_module._decode_region

    def spy(encoded, header, region):
        regions.append(region)
        return decode_region(encoded, header, region)

    monkeypatch.setattr(transforms_module, "_decode_region", spy)
    crop = DecodeRandomResizedCrop(224)  # 500x375 to 224: never at 1/2 scale
    for seed in range(8):
        random.seed(seed)
        from_bytes = crop(torch.from_numpy(data))
        random.seed(seed)
        from_pixels = crop(decode_image(data))
        assert torch.equal(from_bytes, from_pixels), seed
    assert len(regions) == 8 and all(bottom > top for top, _, bottom, _ in regions)


def test_read_only_bytes_are_region_decoded_without_torchs_warning():
    from fastload.decode import nvimgcodec

    if not nvimgcodec.available():
        pytest.skip("needs NVIDIA nvImageCodec: pip install '.[nvimgcodec]'")
    bgr = photo_like_image(np.random.default_rng(6), 375, 500)
    encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    read_only = np.frombuffer(encoded, np.uint8)  # as bytes from a file or an LMDB map
    assert not read_only.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The given NumPy array is not writable"
        random.seed(1)
        got = DecodeRandomResizedCrop(224)(read_only)
    random.seed(1)
    assert torch.equal(got, DecodeRandomResizedCrop(224)(read_only.copy()))
    assert got.shape == (3, 224, 224) and got.dtype == torch.uint8
