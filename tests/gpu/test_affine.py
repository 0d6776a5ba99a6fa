"""RandomAffine and RandomRotation: every sample equals torchvision v2's functional affine
or rotate with that sample's drawn parameters (uint8 and float, nearest and bilinear,
fills, centres, on every device)."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import InterpolationMode

from common_utils import cpu_and_cuda
from fastload import gpu
from gpu_cases import images, per_image

DTYPES = [torch.uint8, torch.float32]


def close(ours: torch.Tensor, want: torch.Tensor) -> None:
    """Equal on the CPU (measured: every pixel, uint8 and float). Elsewhere the grid's
    batched matrix product may round differently from torchvision's per image, and a
    sample landing on a pixel edge pick the other neighbour: under 1 % of pixels."""
    if ours.device.type == "cpu":
        assert torch.equal(ours, want)
        return
    difference = (ours.double() - want.double()).abs()
    scale = 255 if ours.dtype == torch.uint8 else 1
    assert (difference > 1e-4 * scale + 1e-6).double().mean() < 0.01


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [0, (10, 128, 250), None])
@pytest.mark.parametrize("center", [None, (5.0, 30.0)])
def test_affine_equals_torchvision_per_sample(dtype, device, interpolation, fill, center):
    batch = images(n=8, dtype=dtype, device=device)
    fill = None if fill is None else (fill if dtype == torch.uint8 else _on_0_1(fill))
    module = gpu.RandomAffine(
        40, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=(-15, 15, -8, 8),
        interpolation=interpolation, fill=fill, center=center,
        generator=torch.Generator(device).manual_seed(1),
    )  # fmt: skip
    params = module.sample_params(batch.shape, batch.device, module.generator)
    ours = module(batch, params=params)

    def theirs(i, image):
        return TF.affine(
            image, angle=float(params["angle"][i]), translate=params["translate"][i].tolist(),
            scale=float(params["scale"][i]), shear=params["shear"][i].tolist(),
            interpolation=InterpolationMode(interpolation), fill=_fill_arg(fill), center=center,
        )  # fmt: skip

    close(ours, per_image(batch, theirs))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_rotation_equals_torchvision_per_sample(dtype, device, interpolation):
    batch = images(n=8, dtype=dtype, device=device)
    module = gpu.RandomRotation((-170, 170), interpolation=interpolation, fill=7 / 255)
    params = module.sample_params(batch.shape, batch.device)
    ours = module(batch, params=params)
    want = per_image(
        batch,
        lambda i, image: TF.rotate(
            image, float(params["angle"][i]), InterpolationMode(interpolation), fill=7 / 255
        ),
    )
    close(ours, want)


def test_translation_moves_pixels_by_whole_pixels():
    batch = torch.arange(2 * 3 * 6 * 8, dtype=torch.float32).view(2, 3, 6, 8) / 100
    module = gpu.RandomAffine(0, translate=(0.5, 0.5))
    params = {
        "angle": torch.zeros(2), "translate": torch.tensor([[2.0, 0.0], [0.0, -1.0]]),
        "scale": torch.ones(2), "shear": torch.zeros(2, 2),
    }  # fmt: skip
    out = module(batch, params=params)
    assert torch.equal(out[0, :, :, 2:], batch[0, :, :, :-2]) and (out[0, :, :, :2] == 0).all()
    assert torch.equal(out[1, :, :-1], batch[1, :, 1:]) and (out[1, :, -1] == 0).all()


def test_translations_are_drawn_as_whole_pixels_within_the_fractions():
    module = gpu.RandomAffine(0, translate=(0.25, 0.1), generator=torch.Generator().manual_seed(0))
    params = module.sample_params(torch.Size((500, 3, 40, 80)), torch.device("cpu"))
    shifts = params["translate"]
    assert torch.equal(shifts, shifts.round())
    assert shifts[:, 0].abs().max() <= 20 and shifts[:, 1].abs().max() <= 4
    assert len(set(shifts[:, 0].tolist())) > 30  # many different shifts


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 3), height=st.integers(1, 9), width=st.integers(1, 9), uint8=st.booleans())
def test_any_batch_size_and_shape(n, height, width, uint8):
    dtype = torch.uint8 if uint8 else torch.float32
    batch = images(n=n, height=height, width=width, dtype=dtype)
    for module in (gpu.RandomAffine(30, (0.1, 0.1), (0.9, 1.1), 5), gpu.RandomRotation(90)):
        out = module(batch)
        assert out.shape == batch.shape and out.dtype == dtype


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gpu.RandomRotation(30, expand=True), r"expand=True\) gives every angle its own"),
        (lambda: gpu.RandomAffine(-5), r"degrees as one number must be >= 0, got -5"),
        (lambda: gpu.RandomAffine(5, translate=(0.5, 1.5)), r"translate fractions must be in"),
        (lambda: gpu.RandomAffine(5, scale=(0.0, 1.0)), r"scale must be positive"),
        (lambda: gpu.RandomAffine(5, shear=(1, 2, 3)), r"shear must be a number, or 2 or 4"),
        (lambda: gpu.RandomAffine(5, interpolation="bicubic"), r"nearest or bilinear"),
        (lambda: gpu.RandomAffine(float("nan")), r"degrees must be a finite number"),
        (lambda: gpu.RandomRotation(5, fill=float("inf")), r"fill must be a finite number"),
    ],
)
def test_bad_arguments_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _on_0_1(fill):
    return tuple(v / 255 for v in fill) if isinstance(fill, tuple) else fill / 255


def _fill_arg(fill):
    return list(fill) if isinstance(fill, tuple) else fill
