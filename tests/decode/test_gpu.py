from __future__ import annotations

import io
import pickle
import warnings

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchvision.transforms.v2 import functional as TF

from exif_images import LONG, Exif, smooth_rgb
from exif_images import encoded as with_exif
from fastload import DataPrefetcher, FastLoader, LMDBDataset, write_lmdb
from fastload.collate import EncodedBatch, encoded_collate
from fastload.decode import GPUDecoder
from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.testing.synthetic import photo_like_image


def encode(
    height: int, width: int, extension: str = ".jpg", seed: int = 0, **params
) -> torch.Tensor:
    bgr = photo_like_image(np.random.default_rng(seed), height, width)
    flags = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if params.get("progressive") else []
    ok, data = cv2.imencode(extension, bgr, flags)
    assert ok
    return torch.from_numpy(data.reshape(-1).copy())


def reference(data: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(decode_image(data.numpy())).permute(2, 0, 1)


MIXED = [
    encode(48, 64),
    encode(80, 60, ".png", seed=1),
    encode(30, 40, ".bmp", seed=2),
    encode(64, 64, seed=3),
]


def test_cpu_decoding_equals_opencv_for_every_format():
    decoded = GPUDecoder(32, device="cpu").decode(MIXED)
    assert [tuple(image.shape) for image in decoded] == [
        (3, 48, 64),
        (3, 80, 60),
        (3, 30, 40),
        (3, 64, 64),
    ]
    assert all(
        torch.equal(image, reference(data)) for image, data in zip(decoded, MIXED, strict=True)
    )


def test_variable_sizes_in_one_size_out():
    out = GPUDecoder((24, 32), crop="random", device="cpu")(MIXED)
    assert out.shape == (4, 3, 24, 32) and out.dtype == torch.uint8


@pytest.mark.parametrize("crop", ["resize", "center"])
def test_an_image_comes_out_the_same_in_a_batch_of_larger_ones(crop):
    # The small image's canvas slot is padded; its border must not blend with padding.
    decoder = GPUDecoder((24, 32), crop=crop, device="cpu")
    alone = decoder([MIXED[2]])[0]
    in_batch = decoder([MIXED[1], MIXED[2], MIXED[3]])[1]
    assert torch.equal(in_batch, alone)


def test_resize_mode_matches_torchvision_resize():
    out = GPUDecoder((24, 32), crop="resize", device="cpu")(MIXED)
    for image, data in zip(out, MIXED, strict=True):
        want = TF.resize(reference(data).float(), [24, 32], antialias=True)
        difference = (image.float() - want).abs()
        # roi_align averages a box of input pixels per output pixel; torchvision's
        # antialias uses a triangle twice as wide: on textured images ~3 levels apart.
        assert difference.mean() < 4.0 and difference.max() < 48


def test_center_mode_is_resize_then_center_crop():
    # 128 -> Resize(64) -> CenterCrop(56): sizes that divide exactly, so torchvision's
    # two steps round nothing and only the resampling filters differ.
    data = [encode(128, 128)]
    out = GPUDecoder(56, crop="center", crop_fraction=0.875, device="cpu")(data)[0]
    want = TF.center_crop(TF.resize(reference(data[0]).float(), 64, antialias=True), [56, 56])
    assert (out.float() - want).abs().mean() < 4.0


def test_fixed_params_replay():
    decoder = GPUDecoder(16, device="cpu")
    sizes = torch.tensor([[48.0, 64.0], [80, 60], [30, 40], [64, 64]])
    params = decoder.sample_params(sizes, torch.Generator().manual_seed(0))
    assert torch.equal(decoder(MIXED, params=params), decoder(MIXED, params=params))


def test_params_for_another_number_of_images_are_refused():
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    sizes = torch.tensor([[48.0, 64.0]])
    params = decoder.sample_params(sizes, torch.Generator().manual_seed(0))  # for one image
    with pytest.raises(ValueError, match=r"boxes: \(4, 4\) for 4 images, got \(1, 4\)"):
        decoder(MIXED, params=params)


@given(sizes=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 900)), min_size=1, max_size=16))
def test_random_boxes_lie_inside_each_image(sizes):
    decoder = GPUDecoder(224, device="cpu")
    size_tensor = torch.tensor(sizes, dtype=torch.float32)
    params = decoder.sample_params(size_tensor)
    heights, widths = size_tensor[:, 0], size_tensor[:, 1]
    assert (params["top"] >= 0).all() and (params["left"] >= 0).all()
    assert (params["top"] + params["height"] <= heights).all() and (
        params["left"] + params["width"] <= widths
    ).all()


def test_a_corrupt_image_is_an_error_naming_its_place_in_the_batch():
    broken = torch.tensor(list(b"\xff\xd8\xff not a jpeg at all"), dtype=torch.uint8)
    with pytest.raises(ImageDecodeError, match="image 2 of the batch"):
        GPUDecoder(16, device="cpu")([MIXED[0], MIXED[1], broken])


def test_input_must_be_a_batch_of_encoded_images():
    with pytest.raises(
        TypeError, match="expects an EncodedBatch or a list of 1-D uint8 tensors of encoded"
    ):
        GPUDecoder(16, device="cpu")(torch.zeros(2, 10, dtype=torch.uint8))


def test_bad_arguments():
    with pytest.raises(ValueError, match="crop must be one of"):
        GPUDecoder(16, crop="zoom")
    with pytest.raises(ValueError, match=r"crop_fraction must be in \(0, 1\]"):
        GPUDecoder(16, crop_fraction=0)


class RefusesProgressive:
    """Stands in for nvJPEG: decodes like the CPU but, as nvJPEG may, refuses
    progressive JPEGs, and fails a whole batch call when one image fails."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, batch, device):
        self.calls.append(len(batch))
        for data in batch:
            if b"\xff\xc2" in bytes(data.numpy()):  # SOF2: progressive
                raise RuntimeError("nvjpeg: unsupported")
        return [reference(data).to(device) for data in batch]


def test_fallback_to_the_cpu_is_per_image_counted_and_warned_once():
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    decoder._accelerated, decoder._nvjpeg = True, RefusesProgressive()  # the GPU code path
    decoder.backend = "nvjpeg"
    batch = [
        encode(40, 40),
        encode(40, 50, progressive=True),
        encode(30, 30, ".png"),
        encode(20, 20),
    ]
    with pytest.warns(
        UserWarning, match=r"2 image\(s\) decoded on the CPU: not JPEG, or refused by nvjpeg \(1\)"
    ):
        decoded = decoder.decode(batch)
    assert decoder._nvjpeg.calls == [3, 1, 1, 1]  # the batch of JPEGs, then one by one
    assert all(
        torch.equal(image, reference(data)) for image, data in zip(decoded, batch, strict=True)
    )
    assert decoder.cpu_fallbacks == 2
    decoder.decode(batch)  # counted again, not warned again (pytest's error filter would fail)
    assert decoder.cpu_fallbacks == 4


def test_pickles_without_its_thread_pool_and_the_copy_makes_its_own():
    decoder = GPUDecoder(16, device="cpu")
    decoder(MIXED)
    clone = pickle.loads(pickle.dumps(decoder))  # a pool's locks do not pickle
    assert clone._pool is not decoder._pool and clone(MIXED).shape == (4, 3, 16, 16)


def test_a_packed_batch_decodes_as_the_list_it_came_from():
    images, labels = encoded_collate([(data, i) for i, data in enumerate(MIXED)])
    decoder = GPUDecoder(16, crop="resize", device="cpu")
    assert torch.equal(decoder(images), decoder(MIXED)) and labels.tolist() == [0, 1, 2, 3]


def test_lmdb_bytes_to_a_normalised_batch_through_the_prefetcher(tmp_path):
    from fastload import make_image_folder

    root = make_image_folder(tmp_path / "images", num_classes=2, images_per_class=5, size=(80, 60))
    write_lmdb(root, tmp_path / "db", num_workers=0, progress=False)
    loader = FastLoader(
        LMDBDataset(tmp_path / "db", decode=None),
        batch_size=4,
        num_workers=2,
        collate_fn=encoded_collate,
    )
    prefetcher = DataPrefetcher(
        loader, "cpu", decoder=GPUDecoder(32, device="cpu"), mean=(0.5,) * 3, std=(0.5,) * 3
    )
    batches = list(prefetcher)
    assert [tuple(images.shape) for images, _ in batches] == [
        (4, 3, 32, 32),
        (4, 3, 32, 32),
        (2, 3, 32, 32),
    ]
    assert all(
        images.dtype == torch.float32 and images.abs().max() <= 1.0 + 1e-5 for images, _ in batches
    )
    assert [label for _, labels in batches for label in labels.tolist()] == [0] * 5 + [1] * 5


def test_prefetcher_decode_needs_a_list_at_the_named_place():
    prefetcher = DataPrefetcher(
        [{"pixels": MIXED}], "cpu", decoder=GPUDecoder(8, device="cpu"), image="image"
    )
    with pytest.raises(
        KeyError, match="image='image' names no batch of encoded images in a batch of type dict"
    ):
        next(iter(prefetcher))


@pytest.mark.needs_cuda
def test_cuda_decoding_matches_the_cpu_within_decoder_tolerance():
    batch = [encode(48, 64, seed=i) for i in range(8)]
    on_gpu = GPUDecoder(32, device="cuda").decode(batch)
    for image, data in zip(on_gpu, batch, strict=True):
        # nvJPEG (NVJPEG_FLAGS_DEFAULT, as torchvision and torchcodec create it) repeats
        # each 4:2:0 chroma sample; libjpeg-turbo interpolates ("fancy upsampling"). On
        # these images, whose colour noise is per pixel, libjpeg-turbo's own repeating
        # mode is 2.7-3.6 levels from its default (seeds 0-7), 3.9 with its fast IDCT;
        # about 2 levels after resampling to 32 px. A wrong channel order is tens.
        assert (image.cpu().int() - reference(data).int()).abs().float().mean() < 5
    params = {
        k: v
        for k, v in GPUDecoder(32, device="cpu")
        .sample_params(torch.tensor([[48.0, 64.0]] * 8))
        .items()
    }
    # Packed as the collate packs it, "pinned" as FastLoader pins it.
    packed = EncodedBatch.pack(batch).pin_memory()
    gpu_out = GPUDecoder(32, device="cuda")(packed, params=params).cpu()
    cpu_out = GPUDecoder(32, device="cpu")(batch, params=params)
    assert (gpu_out.int() - cpu_out.int()).abs().float().mean() < 3


@pytest.mark.parametrize("crop", ["random", "center", "resize"])
def test_an_empty_list_gives_an_empty_batch(crop):
    out = GPUDecoder((24, 32), crop=crop, device="cpu")([])
    assert out.shape == (0, 3, 24, 32) and out.dtype == torch.uint8


def test_the_gpu_path_reads_a_header_where_the_cpu_path_sees_a_jpeg():
    from fastload.decode.opencv import is_jpeg
    from fastload.jpeg import jpeg_header

    jpeg, png = encode(8, 8), encode(8, 8, ".png")
    for encoded, want in ((jpeg, True), (png, False)):
        forms = (encoded, encoded.numpy(), encoded.numpy().tobytes(), memoryview(encoded.numpy()))
        assert all(is_jpeg(form) is want for form in forms)
        assert all((jpeg_header(form) is not None) is want for form in forms)
    assert not is_jpeg(b"") and not is_jpeg(b"\xff")
    assert jpeg_header(b"") is None and jpeg_header(b"\xff") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": (0.5, 0.1)}, r"scale must be \(low, high\) with 0 < low <= high"),
        ({"ratio": (0.0, 1.0)}, r"ratio must be \(low, high\) with 0 < low <= high"),
        ({"scale": (float("nan"), 1.0)}, r"scale must be a finite number"),
    ],
)
def test_the_crops_on_the_cpu_and_the_gpu_refuse_the_same_ranges_alike(kwargs, message):
    from fastload import gpu, transforms

    for make in (gpu.BatchRandomResizedCrop, transforms.DecodeRandomResizedCrop):
        with pytest.raises(ValueError, match=message):
            make(8, **kwargs)
    with pytest.raises(ValueError, match=message):
        GPUDecoder(8, device="cpu", **kwargs)


def test_flip_mirrors_each_sample_in_the_same_pass():
    batch = [encode(48, 64, seed=4), encode(40, 30, seed=5)]
    params = GPUDecoder(24, device="cpu", crop="center").sample_params(
        torch.tensor([[48.0, 64.0], [40.0, 30.0]])
    )
    straight = GPUDecoder(24, device="cpu", crop="center")(batch, params=params)
    mirrored = GPUDecoder(24, device="cpu", crop="center", flip=1.0)(
        batch, params={**params, "flip": torch.tensor([True, False])}
    )
    assert torch.equal(mirrored[0], straight[0].flip(-1)) and torch.equal(mirrored[1], straight[1])
    coins = GPUDecoder(24, device="cpu", flip=0.5, generator=torch.Generator().manual_seed(0))
    drawn = coins.sample_params(torch.full((400, 2), 50.0))["flip"]
    assert 150 < int(drawn.sum()) < 250  # 400 fair coins; the bound is 5 standard deviations


def test_a_finishing_decoder_is_torchvisions_normalize_of_its_uint8_output():
    batch = [encode(48, 64, seed=6), encode(33, 70, seed=7)]
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    params = GPUDecoder(24, device="cpu").sample_params(torch.tensor([[48.0, 64.0], [33.0, 70.0]]))
    raw = GPUDecoder(24, device="cpu")(batch, params=params)
    finished = GPUDecoder(24, device="cpu", mean=mean, std=std, dtype=torch.float32)(
        batch, params=params
    )
    expected = TF.normalize(TF.to_dtype(raw, torch.float32, scale=True), mean, std)
    assert finished.dtype == torch.float32
    assert (finished - expected).abs().max() <= 0.5 / 255 / min(std) + 1e-5  # uint8's rounding


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"mean": (0.5,) * 3, "std": (0.2,) * 3}, ValueError, "need a floating dtype"),
        ({"mean": (0.5,) * 3}, ValueError, "both mean and std"),
        ({"dtype": torch.int32}, TypeError, "floating dtype"),
        ({"flip": 1.5}, ValueError, "flip"),
    ],
)
def test_bad_finishing_arguments_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        GPUDecoder(24, device="cpu", **kwargs)


def test_statistics_on_the_255_scale_finish_as_the_0_1_ones():
    batch = [encode(48, 64, seed=8)]
    params = GPUDecoder(24, device="cpu").sample_params(torch.tensor([[48.0, 64.0]]))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    unit = GPUDecoder(24, device="cpu", mean=mean, std=std, dtype=torch.float32)
    apex = GPUDecoder(24, device="cpu", mean=[255 * m for m in mean],
                      std=[255 * s for s in std], dtype=torch.float32,
                      statistics_scale=255)  # fmt: skip
    assert torch.allclose(unit(batch, params=params), apex(batch, params=params), atol=1e-5)
    with pytest.raises(ValueError, match="pass statistics_scale=255"):
        GPUDecoder(24, device="cpu", mean=[255 * m for m in mean],
                   std=[255 * s for s in std], dtype=torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="mean and std need 3 values"):
        GPUDecoder(24, device="cpu", mean=(0.5,), std=(0.2,), dtype=torch.float32)


def test_the_decoder_has_one_public_name():
    import fastload.decode
    import fastload.gpu

    assert fastload.decode.GPUDecoder is GPUDecoder
    missing = r"module 'fastload\.gpu' has no attribute 'GPUDecoder'"
    with pytest.raises(AttributeError, match=missing):
        fastload.gpu.GPUDecoder  # noqa: B018 (the attribute access is the test)


def exif_jpeg(height: int, width: int, orientation: int, seed: int = 0, **options) -> torch.Tensor:
    from PIL import Image

    rgb = photo_like_image(np.random.default_rng(seed), height, width)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(rgb).convert(options.pop("mode", "RGB")).save(
        buffer, "JPEG", exif=exif.tobytes(), quality=90, **options
    )
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


class AsNvjpeg:
    """Stands in for nvJPEG: libjpeg-turbo's decode with no EXIF orientation, as nvJPEG
    returns images; records what it is given."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, batch, device):
        from torchvision.io import ImageReadMode, decode_jpeg

        self.calls.append(len(batch))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torchvision's, for torchcodec
            return [decode_jpeg(data, mode=ImageReadMode.RGB).to(device) for data in batch]


def nvjpeg_path(decoder: GPUDecoder) -> AsNvjpeg:
    decoder._accelerated, decoder._nvjpeg = True, AsNvjpeg()  # the GPU code path
    decoder.backend = "nvjpeg"
    return decoder._nvjpeg


@pytest.mark.parametrize("orientation", range(1, 9))
def test_nvjpegs_images_are_shown_as_their_exif_orientation_says(orientation):
    from torchvision.io import ImageReadMode, decode_jpeg

    data = exif_jpeg(30, 50, orientation)
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg_path(decoder)
    (image,) = decoder.decode([data])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        shown = decode_jpeg(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)
    assert torch.equal(image, shown)
    assert tuple(image.shape[1:]) == decode_image(data.numpy()).shape[:2]


def test_only_what_nvjpeg_takes_is_given_to_it_and_the_rest_goes_to_opencv():
    batch = [
        exif_jpeg(40, 60, 6, seed=1),
        exif_jpeg(40, 40, 1, seed=2, mode="CMYK"),  # CMYK: OpenCV's
        encode(30, 30, ".png"),
        exif_jpeg(36, 28, 1, seed=3, progressive=True),
        encode(20, 20),
    ]
    sizes = torch.tensor([[60.0, 40.0], [40, 40], [30, 30], [36, 28], [20, 20]])
    params = GPUDecoder(16, device="cpu").sample_params(sizes, torch.Generator().manual_seed(0))
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg = nvjpeg_path(decoder)
    with pytest.warns(UserWarning, match=r"2 image\(s\) decoded on the CPU"):
        out = decoder(EncodedBatch.pack(batch), params)
    assert nvjpeg.calls == [3]  # one batch call, no image refused one by one
    assert decoder.decoded == {"nvjpeg": 3, "opencv": 2}
    # the boxes were drawn in the displayed sizes: the same batch as OpenCV's whole path
    want = GPUDecoder(16, device="cpu", backend="opencv")(batch, params)
    assert (out.int() - want.int()).abs().float().mean() < 2


# EXIF that a header reader could read otherwise than OpenCV decodes it
ODD_EXIF = [[Exif(6, "<", LONG)], [Exif(6, ">", LONG)], [Exif(1), Exif(6)], [Exif(6), Exif(3)]]


def odd_exif_jpegs() -> list[torch.Tensor]:
    return [
        torch.from_numpy(with_exif("jpeg", smooth_rgb(30, 50, seed), blocks))
        for seed, blocks in enumerate(ODD_EXIF)
    ]


def test_nvjpegs_images_are_shown_as_opencv_shows_them_whatever_the_exif():
    batch = odd_exif_jpegs()
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg = nvjpeg_path(decoder)
    for image, data in zip(decoder.decode(batch), batch, strict=True):
        want = reference(data)
        assert image.shape == want.shape
        assert (image.float() - want.float()).abs().mean() < 1  # libjpeg-turbo, both
    assert nvjpeg.calls == [len(batch)]


def test_what_nvjpeg_refuses_decodes_on_the_cpu_at_the_size_its_header_gave():
    def refuse(batch, device):
        raise RuntimeError("nvJPEG refuses it")

    batch = odd_exif_jpegs()
    sizes = torch.tensor([list(reference(data).shape[1:]) for data in batch], dtype=torch.float)
    params = GPUDecoder(16, device="cpu").sample_params(sizes, torch.Generator().manual_seed(0))
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg_path(decoder)
    decoder._nvjpeg = refuse
    with pytest.warns(UserWarning, match=r"4 image\(s\) decoded on the CPU"):
        out = decoder(batch, params)
    assert torch.equal(out, GPUDecoder(16, device="cpu", backend="opencv")(batch, params))


def test_a_jpeg_cut_short_never_reaches_nvjpeg_and_opencv_names_it():
    good = encode(40, 40)
    cut = good[: len(good) // 2].clone()
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg = nvjpeg_path(decoder)
    with pytest.raises(ImageDecodeError, match="image 1 of the batch"):
        decoder([good, cut])  # OpenCV's part is the host's: it fails before any GPU call
    assert nvjpeg.calls == []
    assert len(decoder.decode([good, good])) == 2 and nvjpeg.calls == [2]


def test_a_jpeg_whose_frame_says_height_0_goes_to_opencv_which_names_it():
    good = encode(40, 40)
    flat = bytearray(good.numpy().tobytes())
    frame = flat.index(b"\xff\xc0")
    flat[frame + 5 : frame + 7] = b"\x00\x00"  # the frame header's height
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg = nvjpeg_path(decoder)
    with pytest.raises(ImageDecodeError, match="image 1 of the batch: not an image OpenCV"):
        decoder(EncodedBatch.pack([good, torch.frombuffer(flat, dtype=torch.uint8)]))
    assert nvjpeg.calls == []


def test_boxes_are_refused_for_an_image_of_no_pixels_naming_it():
    decoder = GPUDecoder(16, device="cpu", backend="opencv")
    sizes = torch.tensor([[30.0, 40.0], [0.0, 20.0], [5.0, 0.0]])
    with pytest.raises(ValueError, match=r"image 1 of the batch is 0x20 pixels"):
        decoder.sample_params(sizes)


def test_a_packed_batch_is_read_with_the_header_table_its_collate_made():
    from fastload.decode.inputs import HostBatch

    packed = EncodedBatch.pack(MIXED)
    batch = HostBatch(packed)
    assert batch.headers is packed.headers
    assert [tuple(t.tolist()) for t in batch.tensors] == [tuple(t.tolist()) for t in MIXED]
    assert np.array_equal(HostBatch(list(MIXED)).headers, packed.headers)
    assert batch.displayed.tolist() == [[48, 64], [0, 0], [0, 0], [64, 64]]


@given(
    box=st.tuples(st.floats(-5, 500), st.floats(-5, 500), st.floats(0.1, 600), st.floats(0.1, 600)),
    size=st.tuples(st.integers(1, 600), st.integers(1, 600)),
)
def test_pixel_regions_are_the_whole_pixels_a_box_touches(box, size):
    import math

    from fastload.decode.inputs import pixel_regions

    boxes = torch.tensor([box], dtype=torch.float32)
    top, left, height, width = (float(v) for v in boxes[0])
    want = [
        max(0, math.floor(top)), max(0, math.floor(left)),
        min(size[0], math.ceil(top + height)), min(size[1], math.ceil(left + width)),
    ]  # fmt: skip
    assert pixel_regions(boxes, np.array([size])).tolist() == [want]


def test_a_cpu_share_of_the_jpegs_goes_to_opencv_spread_out_and_is_not_a_fallback():
    batch = [encode(30 + i, 40, seed=i) for i in range(10)]
    decoder = GPUDecoder(16, device="cpu", backend="opencv", cpu_share=0.3)
    nvjpeg = nvjpeg_path(decoder)
    plan = decoder.plan(EncodedBatch.pack(batch))
    assert sorted(plan.host) == [0, 3, 6] and plan.gpu == [1, 2, 4, 5, 7, 8, 9]
    assert plan.shared == 3 and plan.staged is None  # staged for a CUDA device only
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a share is chosen: no fallback warning
        out = decoder.run(plan)
    assert nvjpeg.calls == [7]
    assert decoder.decoded == {"nvjpeg": 7, "opencv": 3} and decoder.cpu_fallbacks == 0
    # the stand-in decodes as OpenCV does: the same batch as with no share
    whole = GPUDecoder(16, device="cpu", backend="opencv")
    nvjpeg_path(whole)
    params = {"top": plan.boxes[:, 0], "left": plan.boxes[:, 1], "height": plan.boxes[:, 2],
              "width": plan.boxes[:, 3], "flip": plan.flip}  # fmt: skip
    assert torch.equal(out, whole(batch, params))


def test_with_a_cpu_share_the_images_the_gpu_cannot_take_are_still_counted_as_fallbacks():
    batch = [encode(20, 20, seed=i) for i in range(4)] + [encode(30, 30, ".png")]
    decoder = GPUDecoder(16, device="cpu", backend="opencv", cpu_share=0.5)
    nvjpeg = nvjpeg_path(decoder)
    with pytest.warns(UserWarning, match=r"^1 image\(s\) decoded on the CPU"):
        decoder(batch)
    assert nvjpeg.calls == [2]
    assert decoder.decoded == {"nvjpeg": 2, "opencv": 3} and decoder.cpu_fallbacks == 1


@pytest.mark.parametrize(
    "share, count", [(0.0, 0), (0.01, 0), (0.0625, 1), (0.1, 1), (0.5, 4), (1.0, 8)]
)
def test_the_cpu_share_rounds_to_whole_images(share, count):
    decoder = GPUDecoder(16, device="cpu", backend="opencv", cpu_share=share)
    nvjpeg_path(decoder)
    plan = decoder.plan([encode(20, 20, seed=i) for i in range(8)])
    assert plan.shared == len(plan.host) == count and len(plan.gpu) == 8 - count


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), True, "0.3"])
def test_a_cpu_share_that_is_not_a_probability_is_refused_by_name(share):
    with pytest.raises(ValueError, match=r"^cpu_share must be a probability in \[0, 1\], got "):
        GPUDecoder(16, device="cpu", cpu_share=share)


@pytest.mark.needs_cuda
def test_on_cuda_a_cpu_share_is_staged_in_one_pinned_buffer_and_decodes_as_the_rest():
    batch = [encode(48, 64, seed=i) for i in range(8)]
    params = GPUDecoder(32, device="cpu").sample_params(torch.tensor([[48.0, 64.0]] * 8))
    shared = GPUDecoder(32, device="cuda", cpu_share=0.5)
    plan = shared.plan(EncodedBatch.pack(batch), params)
    assert plan.staged is not None and plan.staged.buffer.is_pinned()
    assert sorted(plan.staged.places) == sorted(plan.host) == [0, 2, 4, 6]
    out = shared.run(plan).cpu()
    assert shared.decoded == {"nvjpeg": 4, "opencv": 4} and shared.cpu_fallbacks == 0
    alone = GPUDecoder(32, device="cuda")(batch, params=params).cpu()
    # the CPU's images differ from nvJPEG's by its chroma upsampling only (see above);
    # nvJPEG's are the same images either way
    difference = (out.int() - alone.int()).abs().float().mean(dim=(1, 2, 3))
    assert difference[[0, 2, 4, 6]].max() < 3 and difference[[1, 3, 5, 7]].max() == 0


@pytest.mark.needs_cuda
def test_on_cuda_a_cpu_share_through_the_prefetchers_threads_gives_the_direct_calls_batches(
    tmp_path,
):
    from fastload import make_image_folder

    root = make_image_folder(tmp_path / "images", num_classes=2, images_per_class=12, size=(80, 60))
    write_lmdb(root, tmp_path / "db", num_workers=0, progress=False)
    loader = FastLoader(LMDBDataset(tmp_path / "db", decode=None), batch_size=8,
                        collate_fn=encoded_collate)  # fmt: skip
    options = {"crop": "resize", "device": "cuda", "cpu_share": 0.5, "dtype": torch.float32,
               "mean": (0.5,) * 3, "std": (0.5,) * 3}  # fmt: skip
    decoder = GPUDecoder(32, **options)
    through = [images.cpu() for images, _ in DataPrefetcher(loader, decoder=decoder)]
    direct = GPUDecoder(32, **options)
    want = [direct(encoded).cpu() for encoded, _ in loader]
    assert len(through) == len(want) == 3
    for got, expected in zip(through, want, strict=True):  # a race would show here
        assert torch.equal(got, expected)
    # (the prefetcher's own counts may hold the next epoch's first batches, begun ahead)
    assert direct.decoded == {"nvjpeg": 12, "opencv": 12} and decoder.cpu_fallbacks == 0
