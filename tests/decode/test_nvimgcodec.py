"""GPUDecoder's nvImageCodec backend: region decode equal to the full decode's slice, the
fallback chain and its counters, hostile bytes named, no start-up noise. On a machine
without CUDA its CPU backend runs the same code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.dlpack import from_dlpack

from exif_images import LONG, Exif, encoded, smooth_rgb
from fastload.decode import GPUDecoder, nvimgcodec
from fastload.decode import opencv as decode_module
from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.jpeg import jpeg_header
from fastload.testing.synthetic import photo_like_image

if not nvimgcodec.available():
    pytest.skip("needs NVIDIA nvImageCodec: pip install '.[nvimgcodec]'",
                allow_module_level=True)  # fmt: skip


def jpeg(height: int, width: int, seed: int = 0, orientation: int = 1, **options) -> torch.Tensor:
    rgb = photo_like_image(np.random.default_rng(seed), height, width)[:, :, ::-1].copy()
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "JPEG", exif=exif.tobytes(), quality=92, **options)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def png(height: int, width: int) -> torch.Tensor:
    bgr = photo_like_image(np.random.default_rng(9), height, width)
    return torch.from_numpy(cv2.imencode(".png", bgr)[1].reshape(-1).copy())


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_a_region_is_the_full_decodes_slice_in_the_displayed_image(orientation):
    data = jpeg(60, 90, orientation=orientation)
    codec = nvimgcodec.NvImageCodec(torch.device("cpu"), threads=1)
    (height, width) = jpeg_header(data).displayed
    full = decode_image(data.numpy())
    assert (height, width) == full.shape[:2]  # EXIF rotation applied to the sizes too
    region = (5, 10, 35, 50)
    crop = codec.decode([data.numpy()], {0: region})[0]
    assert torch.equal(codec.decode([data.numpy()], {0: None})[0], torch.from_numpy(full))
    assert torch.equal(crop, torch.from_numpy(full[5:35, 10:50]))


def test_region_decoding_gives_the_whole_decodes_batch():
    batch = [jpeg(48, 64, seed=1), jpeg(75, 50, seed=2, progressive=True), jpeg(33, 33, seed=3)]
    sizes = torch.tensor([[48.0, 64.0], [75.0, 50.0], [33.0, 33.0]])
    for crop in ("random", "center"):
        params = GPUDecoder(24, device="cpu", crop=crop, flip=0.5).sample_params(
            sizes, torch.Generator().manual_seed(0)
        )
        regions = GPUDecoder(24, device="cpu", crop=crop, backend="nvimgcodec")(batch, params)
        whole = GPUDecoder(24, device="cpu", crop=crop, backend="opencv")(batch, params)
        assert (regions.int() - whole.int()).abs().max() <= 1, crop  # rounding at .5 only


def test_whole_images_and_regions_in_one_batch():
    batch = [jpeg(48, 64, seed=1), jpeg(40, 30, seed=2, orientation=6), jpeg(33, 33, seed=3)]
    params = {  # the first box is the whole image (no sub-stream), the others are not
        "top": torch.tensor([0.0, 3.5, 2.0]),
        "left": torch.tensor([0.0, 1.25, 0.0]),
        "height": torch.tensor([48.0, 20.0, 31.0]),
        "width": torch.tensor([64.0, 30.0, 33.0]),
        "flip": torch.tensor([False, True, False]),
    }
    regions = GPUDecoder(24, device="cpu", backend="nvimgcodec")(batch, params)
    whole = GPUDecoder(24, device="cpu", backend="opencv")(batch, params)
    assert (regions.int() - whole.int()).abs().max() <= 1


def test_a_whole_image_where_a_region_was_asked_is_refused_not_cropped_wrong():
    image = jpeg(40, 60)

    class WholeImages:  # a decoder that ignores the regions it is given
        def __init__(self, decoder):
            self.decoder = decoder

        def decode(self, streams, **kwargs):
            whole = [nvimgcodec.load().CodeStream(image.numpy()) for _ in streams]
            return self.decoder.decode(whole, **kwargs)

    decoder = GPUDecoder(24, device="cpu", backend="nvimgcodec", scale=(0.1, 0.2))
    decoder._codec.decoder = WholeImages(decoder._codec.decoder)
    with pytest.raises(ValueError, match=r"image 0 of the batch is \(40, 60\) \(height, width\)"):
        decoder([image])


@pytest.mark.parametrize(
    ("device", "chosen"),
    [("cpu", "nvimgcodec"), pytest.param("cuda", "nvjpeg", marks=pytest.mark.needs_cuda)],
)
def test_auto_chooses_nvjpeg_on_a_gpu_and_nvimgcodec_on_the_cpu(device, chosen):
    assert GPUDecoder(8, device=device).backend == chosen


def test_the_backend_is_chosen_at_construction_and_said():
    assert GPUDecoder(8, device="cpu").backend == "nvimgcodec"
    assert "backend='nvimgcodec'" in repr(GPUDecoder(8, device="cpu"))
    with pytest.raises(ValueError, match="backend='nvjpeg' needs a CUDA device"):
        GPUDecoder(8, device="cpu", backend="nvjpeg")
    with pytest.raises(ValueError, match="backend must be one of"):
        GPUDecoder(8, device="cpu", backend="pil")


def test_what_it_cannot_take_goes_to_opencv_counted_per_backend():
    decoder = GPUDecoder(16, device="cpu")
    batch = [jpeg(40, 40), png(30, 20), jpeg(20, 30, seed=4)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on a CPU device: OpenCV is expected there
        out = decoder(batch)
    assert out.shape == (3, 3, 16, 16)
    assert decoder.decoded == {"nvimgcodec": 2, "opencv": 1}


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"", "image 1 of the batch"),
        (b"GIF89a not really", "image 1 of the batch"),
        (None, "image 1 of the batch"),  # a JPEG cut in half
    ],
)
def test_hostile_bytes_raise_image_decode_error_naming_the_sample(bad, message):
    good = jpeg(40, 40)
    data = (
        good[: len(good) // 2].clone()
        if bad is None
        else torch.frombuffer(bytearray(bad) or bytearray(1), dtype=torch.uint8)[: len(bad)]
    )
    with pytest.raises(ImageDecodeError, match=message):
        GPUDecoder(16, device="cpu")([good, data])


def test_a_jpeg_declaring_no_pixels_is_an_image_decode_error_naming_it():
    bgr = photo_like_image(np.random.default_rng(3), 24, 32)
    data = bytearray(cv2.imencode(".jpg", bgr)[1].tobytes())  # no EXIF: nvImageCodec's size
    frame = data.find(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    data[frame + 5 : frame + 9] = bytes(4)  # 0 x 0
    with pytest.raises(ImageDecodeError, match="image 1 of the batch"):
        GPUDecoder(16, device="cpu")([jpeg(40, 40), torch.frombuffer(data, dtype=torch.uint8)])


def test_a_header_past_the_pixel_limit_is_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(decode_module, "MAX_PIXELS", 1000)
    with pytest.raises(ImageDecodeError, match="image 0 of the batch"):
        GPUDecoder(16, device="cpu")([jpeg(40, 40)])


def test_nothing_is_printed_on_import_or_construction():
    script = (
        "from fastload.decode import GPUDecoder\n"
        "decoder = GPUDecoder(8, device='cpu', threads=4)\n"
        "print(decoder.backend)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))  # fmt: skip
    assert done.returncode == 0 and done.stdout == "nvimgcodec\n" and done.stderr == ""


@pytest.mark.needs_cuda
def test_on_cuda_the_hardware_chain_gives_the_cpu_backends_batch():
    batch = [jpeg(48, 64, seed=1), jpeg(75, 50, seed=2), png(30, 20), jpeg(33, 33, seed=3)]
    sizes = torch.tensor([[48.0, 64.0], [75.0, 50.0], [30.0, 20.0], [33.0, 33.0]])
    params = GPUDecoder(24, device="cpu", flip=0.5).sample_params(
        sizes, torch.Generator().manual_seed(1)
    )
    cpu = GPUDecoder(24, device="cpu")(batch, params)
    with pytest.warns(UserWarning, match="1 image\\(s\\) decoded on the CPU"):
        decoder = GPUDecoder(24, device="cuda", backend="nvimgcodec")
        cuda = decoder(batch, params)
    assert decoder.backend == "nvimgcodec" and decoder.decoded == {"nvimgcodec": 3, "opencv": 1}
    # nvJPEG's IDCT and upsampling differ from libjpeg-turbo's by a level or two
    assert (cuda.cpu().float() - cpu.float()).abs().mean() < 2


@pytest.mark.needs_cuda
@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
@pytest.mark.parametrize("orientation", [1, 6])
def test_on_cuda_a_region_is_the_cpu_backends_region(progressive, orientation):
    # baseline JPEGs go to the hardware decoder, progressive ones to the CUDA decoder
    data = jpeg(120, 160, seed=4, orientation=orientation, progressive=progressive)
    on_gpu = nvimgcodec.NvImageCodec(torch.device("cuda"), threads=2)
    on_cpu = nvimgcodec.NvImageCodec(torch.device("cpu"), threads=1)
    region = (8, 16, 72, 112)
    gpu_crop = on_gpu.decode([data.numpy()], {0: region})[0]
    cpu_crop = on_cpu.decode([data.numpy()], {0: region})[0]
    assert gpu_crop.device.type == "cuda" and gpu_crop.dtype == torch.uint8
    assert gpu_crop.shape == cpu_crop.shape == (64, 96, 3)
    assert (gpu_crop.cpu().float() - cpu_crop.float()).abs().mean() < 2


@pytest.mark.needs_cuda
def test_on_cuda_the_hardware_decoder_takes_a_baseline_jpegs_region():
    # nvImageCodec 0.9 on its own hands every region to the CPU (seen on an H100)
    codec = nvimgcodec.load()
    kinds = [codec.BackendKind.HW_GPU_ONLY]
    hardware = nvimgcodec.make_decoder(codec, torch.cuda.current_device(), kinds, threads=1)
    whole = codec.CodeStream(jpeg(480, 640, seed=5).numpy())
    if hardware.decode([whole])[0] is None:
        pytest.skip(f"{torch.cuda.get_device_name()} has no hardware JPEG decoder")
    region = whole.get_sub_code_stream(region=codec.Region(8, 16, 72, 112))
    crop = hardware.decode([region])[0]
    assert crop is not None, "the hardware decoder declined a region"
    on_cpu = nvimgcodec.NvImageCodec(torch.device("cpu"), threads=1)
    cpu_crop = on_cpu.decode([jpeg(480, 640, seed=5).numpy()], {0: (8, 16, 72, 112)})[0]
    gpu_crop = from_dlpack(crop).cpu()
    assert gpu_crop.shape == cpu_crop.shape == (64, 96, 3)
    assert (gpu_crop.int() - cpu_crop.int()).abs().max() <= 2


def test_a_cpu_share_takes_whole_images_from_opencv_and_regions_from_nvimgcodec():
    batch = [jpeg(48 + i, 64, seed=i, orientation=1 + i % 8) for i in range(6)]
    sizes = torch.tensor([[48.0 + i, 64.0][:: 1 if i % 8 < 4 else -1] for i in range(6)])
    params = GPUDecoder(24, device="cpu").sample_params(sizes, torch.Generator().manual_seed(3))
    shared = GPUDecoder(24, device="cpu", backend="nvimgcodec", cpu_share=0.5)
    plan = shared.plan(batch, params)
    assert sorted(plan.host) == [0, 2, 4] and sorted(plan.regions) == [1, 3, 5]
    out = shared.run(plan)
    assert shared.decoded == {"nvimgcodec": 3, "opencv": 3}
    # both decode with libjpeg-turbo and apply EXIF orientation: the batch alone, but for
    # rounding at .5 (a region resampled from its own corner)
    alone = GPUDecoder(24, device="cpu", backend="nvimgcodec")(batch, params)
    assert (out.int() - alone.int()).abs().max() <= 1


@pytest.mark.needs_cuda
def test_on_cuda_a_cpu_share_is_staged_hwc_beside_the_regions():
    batch = [jpeg(48, 64, seed=i) for i in range(6)]
    params = GPUDecoder(24, device="cpu").sample_params(torch.tensor([[48.0, 64.0]] * 6))
    shared = GPUDecoder(24, device="cuda", backend="nvimgcodec", cpu_share=0.5)
    plan = shared.plan(batch, params)
    assert plan.staged is not None and not plan.staged.chw
    assert sorted(plan.staged.places) == [0, 2, 4] and sorted(plan.regions) == [1, 3, 5]
    out = shared.run(plan).cpu()
    assert shared.decoded == {"nvimgcodec": 3, "opencv": 3} and shared.cpu_fallbacks == 0
    on_the_cpu = GPUDecoder(24, device="cpu", backend="opencv")(batch, params)
    # the CPU's images are OpenCV's; the engines' within a level of them (as above)
    difference = (out.int() - on_the_cpu.int()).abs()
    assert difference[[0, 2, 4]].max() <= 1 and difference.float().mean() < 2


def test_images_whose_exif_blocks_disagree_go_to_opencv_and_crop_as_its_decode():
    # nvImageCodec reads the last of several EXIF blocks with an orientation, OpenCV the
    # first: such an image is OpenCV's; one block, of any encoding, reads alike in both
    cases = [[Exif(6), Exif(3)], [Exif(1), Exif(6)], [Exif(6, "<", LONG)], [Exif(8, ">", LONG)]]
    batch = [
        torch.from_numpy(encoded("jpeg", smooth_rgb(40, 64, i), b)) for i, b in enumerate(cases)
    ]
    sizes = torch.tensor([decode_image(data.numpy()).shape[:2] for data in batch]).float()
    params = GPUDecoder(16, device="cpu").sample_params(sizes, torch.Generator().manual_seed(3))
    decoder = GPUDecoder(16, device="cpu", backend="nvimgcodec")
    out = decoder(batch, params)
    assert decoder.decoded == {"nvimgcodec": 2, "opencv": 2}
    assert torch.equal(out, GPUDecoder(16, device="cpu", backend="opencv")(batch, params))
