"""Flips, crops and resizes: parity with torchvision.transforms.v2.functional image by
image (tolerances in gpu_cases.py), and properties of the drawn boxes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchvision.transforms.v2 import functional as TF

from fastload import gpu
from gpu_cases import (
    assert_parity,
    images,
    per_image,
)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_flips_equal_torchvision(dtype):
    batch = images(dtype=dtype)
    for module, kernel in [
        (gpu.RandomHorizontalFlip(), TF.horizontal_flip),
        (gpu.RandomVerticalFlip(), TF.vertical_flip),
    ]:
        params = module.sample_params(batch.shape, batch.device)
        flipped = [kernel(x) if params["apply"][i] else x for i, x in enumerate(batch)]
        assert torch.equal(module(batch, params=params), torch.stack(flipped))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("padding_mode", ["constant", "edge", "reflect"])
def test_random_crop_equals_torchvision_exactly(dtype, padding_mode):
    batch = images(dtype=dtype)
    module = gpu.RandomCrop(
        24, padding=(3, 5), fill=7 if dtype == torch.uint8 else 0.5, padding_mode=padding_mode
    )
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch,
        lambda i, x: TF.crop(
            TF.pad(x, [3, 5], fill=module.fill, padding_mode=padding_mode),
            int(params["top"][i]),
            int(params["left"][i]),
            24,
            24,
        ),
    )
    assert torch.equal(module(batch, params=params), reference)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", [24, 70, (30, 60)])
def test_center_crop_equals_torchvision(dtype, size):
    batch = images(dtype=dtype)
    assert torch.equal(
        gpu.CenterCrop(size)(batch),
        TF.center_crop(batch, size if isinstance(size, tuple) else [size]),
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", [20, (24, 30), 80])
def test_resize_equals_torchvision(dtype, size):
    batch = images(dtype=dtype)
    assert_parity(
        gpu.Resize(size)(batch),
        TF.resize(batch, size, antialias=True),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_resized_crop_matches_torchvision(dtype):
    batch = images(n=16, dtype=dtype)
    module = gpu.RandomResizedCrop((24, 32), scale=(0.2, 1.0))
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch,
        lambda i, x: TF.resized_crop(
            x,
            int(params["top"][i]),
            int(params["left"][i]),
            int(params["height"][i]),
            int(params["width"][i]),
            [24, 32],
            antialias=True,
        ),
    )
    difference = (module(batch, params=params).double() - reference.double()).abs() / (
        255 if dtype == torch.uint8 else 1
    )
    assert difference.mean() < 3e-3 and difference.max() < 0.08


@given(
    height=st.integers(8, 200),
    width=st.integers(8, 200),
    scale=st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)).map(sorted),
    ratio=st.tuples(st.floats(0.2, 5.0), st.floats(0.2, 5.0)).map(sorted),
    seed=st.integers(0, 2**16),
)
def test_resized_crop_boxes_always_lie_inside_the_image(height, width, scale, ratio, seed):
    module = gpu.RandomResizedCrop(
        16, scale=scale, ratio=ratio, generator=torch.Generator().manual_seed(seed)
    )
    params = module.sample_params(torch.Size((32, 3, height, width)), torch.device("cpu"))
    assert (params["height"] >= 1).all() and (params["width"] >= 1).all()
    assert (params["top"] >= 0).all() and (params["left"] >= 0).all()
    assert (params["top"] + params["height"] <= height).all()
    assert (params["left"] + params["width"] <= width).all()


@given(
    size=st.tuples(st.integers(1, 30), st.integers(1, 30)),
    padding=st.integers(0, 6),
    dtype=st.sampled_from([torch.uint8, torch.float32]),
)
def test_random_crop_output_size(size, padding, dtype):
    batch = images(2, 24, 24, dtype=dtype)
    out = gpu.RandomCrop(size, padding=padding, pad_if_needed=True)(batch)
    assert out.shape == (2, 3, *size) and out.dtype == dtype


def test_a_crop_larger_than_the_image_is_an_error():
    with pytest.raises(
        ValueError, match=r"crop size \(50, 50\) is larger than the \(padded\) image \(40, 56\)"
    ):
        gpu.RandomCrop(50)(images())
