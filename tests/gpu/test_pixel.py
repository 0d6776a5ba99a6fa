"""The per-pixel operations of the policies equal torchvision v2's functional ones, image by
image, for each sample's own magnitude (uint8 and float, on every device)."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from common_utils import cpu_and_cuda
from fastload import gpu
from fastload.gpu.functional import pixel
from gpu_cases import images, per_image

DTYPES = [torch.uint8, torch.float32]


def scale(dtype: torch.dtype) -> float:
    return 255.0 if dtype == torch.uint8 else 1.0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (pixel.invert, TF.invert),
        (pixel.autocontrast, TF.autocontrast),
        (pixel.equalize, TF.equalize),
    ],
    ids=["invert", "autocontrast", "equalize"],
)
def test_whole_batch_operations_equal_torchvision_per_image(ours, theirs, dtype, device):
    batch = images(dtype=dtype, device=device)
    batch = batch // 2 + 40 if dtype == torch.uint8 else batch / 2 + 0.15  # room to stretch
    assert torch.equal(ours(batch), per_image(batch, lambda _, image: theirs(image)))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_posterize_with_each_samples_bits(dtype, device):
    batch = images(n=9, dtype=dtype, device=device)
    bits = torch.arange(9, device=device)  # 0 to 8
    want = per_image(batch, lambda i, image: TF.posterize(image, int(bits[i])))
    assert torch.equal(pixel.posterize(batch, bits), want)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_solarize_with_each_samples_threshold(dtype, device):
    batch = images(n=5, dtype=dtype, device=device)
    threshold = torch.tensor([0.0, 0.3, 0.5, 0.77, 1.0], device=device) * scale(dtype)
    want = per_image(batch, lambda i, image: TF.solarize(image, float(threshold[i])))
    assert torch.equal(pixel.solarize(batch, threshold), want)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_sharpness_with_each_samples_factor(dtype, device):
    batch = images(n=5, dtype=dtype, device=device)
    factor = torch.tensor([0.0, 0.5, 1.0, 1.9, 3.0], device=device)
    want = per_image(batch, lambda i, image: TF.adjust_sharpness(image, float(factor[i])))
    ours = pixel.adjust_sharpness(batch, factor)
    if dtype == torch.uint8:  # the same sums in another order: at most one level apart
        assert (ours.int() - want.int()).abs().max() <= 1
    else:
        torch.testing.assert_close(ours, want, rtol=0, atol=1e-6)
    tiny = batch[:, :, :2, :2]  # too small for the 3x3 kernel: left as it is, as torchvision
    assert torch.equal(pixel.adjust_sharpness(tiny, factor), tiny)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clip", [True, False])
def test_gaussian_noise_draws_what_torchvision_draws_for_the_same_seed(dtype, device, clip):
    image = images(n=1, dtype=dtype, device=device)
    noise = gpu.GaussianNoise(mean=0.05, sigma=0.2, clip=clip)
    torch.manual_seed(3)
    ours = noise(image)
    torch.manual_seed(3)
    theirs = TF.gaussian_noise(image[0], mean=0.05, sigma=0.2, clip=clip)
    assert torch.equal(ours[0], theirs)


def test_autocontrast_stretches_low_contrast_images_and_p_decides_which():
    flat = images(n=8) // 3 + 60  # every channel well inside 0..255
    module = gpu.RandomAutocontrast(p=0.5, generator=torch.Generator().manual_seed(0))
    # its own generator's coins (without it the draw is the global RNG's, which the tests
    # before this one move: all eight coins came up the same in one CI order)
    params = module.sample_params(flat.shape, flat.device, module.generator)
    out = module(flat, params=params)
    changed = (out != flat).flatten(1).any(dim=1)
    assert torch.equal(changed, params["apply"]) and 0 < int(changed.sum()) < 8
    stretched = out[params["apply"]]
    assert int(stretched.amin()) == 0 and int(stretched.amax()) == 255


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 4),
    height=st.integers(1, 12),
    width=st.integers(1, 12),
    uint8=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_any_batch_size_and_shape_keeps_shape_dtype_and_range(n, height, width, uint8, seed):
    dtype = torch.uint8 if uint8 else torch.float32
    generator = torch.Generator().manual_seed(seed)
    batch = images(n=n, height=height, width=width, dtype=dtype, seed=seed)
    for module in (
        gpu.RandomInvert(p=1.0), gpu.RandomPosterize(2, p=1.0), gpu.RandomSolarize(0.5, p=1.0),
        gpu.RandomAdjustSharpness(2.0, p=1.0), gpu.RandomAutocontrast(p=1.0),
        gpu.RandomEqualize(p=1.0), gpu.GaussianNoise(generator=generator),
    ):  # fmt: skip
        out = module(batch)
        assert out.shape == batch.shape and out.dtype == dtype
        if not uint8 and out.numel():
            assert float(out.min()) >= 0 and float(out.max()) <= 1


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: gpu.RandomPosterize(bits=9),
            ValueError,
            r"bits must be an int in \[0, 8\], got 9",
        ),
        (lambda: gpu.RandomPosterize(bits=2.5), ValueError, r"bits must be an int"),
        (lambda: gpu.RandomAdjustSharpness(-1), ValueError, r"sharpness_factor must be >= 0"),
        (lambda: gpu.GaussianNoise(sigma=-0.1), ValueError, r"sigma must be >= 0, got -0.1"),
        (lambda: gpu.RandomInvert(p=1.5), ValueError, r"p must be a probability in \[0, 1\]"),
    ],
)
def test_bad_arguments_are_refused_by_name(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_solarize_threshold_on_the_wrong_scale_is_refused():
    with pytest.raises(ValueError, match=r"threshold 128.0 is above the largest torch.float32"):
        gpu.RandomSolarize(threshold=128, p=1.0)(images(dtype=torch.float32))
