"""ColorJitter, RandomGrayscale, Normalize and ToDtype against torchvision."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchvision.transforms.v2 import functional as TF

from fastload import gpu
from gpu_cases import (
    FLOAT_ONLY,
    assert_parity,
    images,
    per_image,
)


def colour_reference(module, params, batch):
    kernels = {
        "brightness": TF.adjust_brightness,
        "contrast": TF.adjust_contrast,
        "saturation": TF.adjust_saturation,
        "hue": TF.adjust_hue,
    }

    def one(i, image):
        if not params["apply"][i]:
            return image
        for index in params["order"].tolist():
            name = module.OPERATIONS[index]
            if name in params:
                image = kernels[name](image, params[name][i].item())
        return image

    return per_image(batch, one)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("only", ["brightness", "contrast", "saturation", "hue", None])
def test_color_jitter_matches_torchvision(dtype, only):
    batch = images(dtype=dtype)
    kwargs = {"brightness": 0.5, "contrast": 0.5, "saturation": 0.5, "hue": 0.2}
    module = gpu.ColorJitter(**({only: kwargs[only]} if only else kwargs), p=0.8)
    params = module.sample_params(batch.shape, batch.device)
    ours, reference = module(batch, params=params), colour_reference(module, params, batch)
    assert_parity(ours, reference, dtype, uint8_max=8 if only is None else 2, uint8_mean=2.0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_grayscale_matches_torchvision(dtype):
    batch = images(dtype=dtype)
    module = gpu.RandomGrayscale(p=0.5)
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch, lambda i, x: TF.rgb_to_grayscale(x, 3) if params["apply"][i] else x
    )
    assert_parity(module(batch, params=params), reference, dtype)


def test_normalize_and_to_dtype_equal_torchvision():
    batch = images()
    as_float = gpu.ToDtype(torch.float32, scale=True)(batch)
    torch.testing.assert_close(as_float, TF.to_dtype(batch, torch.float32, scale=True))
    module = FLOAT_ONLY["Normalize"]()
    torch.testing.assert_close(
        module(as_float), TF.normalize(as_float, list(module.mean), list(module.std))
    )
    with pytest.raises(
        TypeError,
        match=r"Normalize expects floating images, got torch\.uint8; convert with ToDtype first",
    ):
        module(batch)
    with pytest.raises(ValueError, match="Normalize has mean/std for 3 channels, images have 1"):
        module(as_float[:, :1])


@given(
    shape=st.tuples(st.integers(1, 4), st.integers(12, 40), st.integers(12, 40)),
    dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64, torch.bfloat16]),
    brightness=st.floats(0, 1),
    hue=st.floats(0, 0.5),
)
def test_color_jitter_keeps_shape_dtype_and_range(shape, dtype, brightness, hue):
    n, height, width = shape
    batch = images(n, height, width, dtype=dtype)
    out = gpu.ColorJitter(brightness=brightness, contrast=0.3, saturation=0.3, hue=hue)(batch)
    assert out.shape == batch.shape and out.dtype == dtype
    assert out.min() >= 0 and out.max() <= (255 if dtype == torch.uint8 else 1.0 + 1e-2)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_normalize_into_equals_normalize(dtype):
    from fastload.gpu.functional import normalize, normalize_coefficients, normalize_into

    batch = images(n=4, dtype=dtype)
    scale, shift = normalize_coefficients(
        (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), uint8=dtype == torch.uint8
    )
    out = normalize_into(torch.empty(batch.shape), batch, scale, shift)
    torch.testing.assert_close(out, normalize(batch.float(), scale, shift), rtol=0, atol=1e-5)


def test_to_dtype_refuses_what_is_not_a_dtype():
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype, got 'float32'"):
        gpu.ToDtype("float32")
