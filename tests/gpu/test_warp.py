"""RandomPerspective and ElasticTransform: every sample equals torchvision v2's functional
perspective or elastic with that sample's drawn corners or displacement."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import InterpolationMode
from torchvision.transforms.functional import _get_perspective_coeffs

from common_utils import cpu_and_cuda
from fastload import gpu
from gpu_cases import images, per_image

DTYPES = [torch.uint8, torch.float32]
CORNERS = [[0, 0], [55, 0], [55, 39], [0, 39]]  # of the 40x56 test images


def fill_for(dtype, fill):
    return fill if fill is None or dtype == torch.uint8 else fill / 255


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [0, 200, None])
def test_perspective_equals_torchvision_per_sample(dtype, device, interpolation, fill):
    batch = images(n=8, dtype=dtype, device=device)
    fill = fill_for(dtype, fill)
    module = gpu.RandomPerspective(0.6, p=1.0, interpolation=interpolation, fill=fill)
    params = module.sample_params(batch.shape, batch.device)
    ours = module(batch, params=params)
    for i, endpoints in enumerate(params["endpoints"].tolist()):
        want_coefficients = torch.tensor(_get_perspective_coeffs(CORNERS, endpoints))
        torch.testing.assert_close(params["coefficients"][i].cpu(), want_coefficients)
    want = per_image(
        batch,
        lambda i, image: TF.perspective(
            image, CORNERS, params["endpoints"][i].tolist(), InterpolationMode(interpolation),
            fill=fill,
        ),
    )  # fmt: skip
    difference = (ours.double() - want.double()).abs()
    if device == "cpu":  # the coefficients solved apart (solve vs lstsq): last-bit grids
        limit = 1 if dtype == torch.uint8 else 1e-5
        assert difference.max() <= limit and (difference > 0).double().mean() < 0.01
    else:
        assert (difference > (1 if dtype == torch.uint8 else 1e-4)).double().mean() < 0.01


def test_perspective_corners_stay_within_the_distortion_bounds():
    module = gpu.RandomPerspective(0.5, generator=torch.Generator().manual_seed(0))
    params = module.sample_params(torch.Size((2000, 3, 40, 56)), torch.device("cpu"))
    corners = params["endpoints"]
    bound_w, bound_h = int(0.5 * 28) + 1, int(0.5 * 20) + 1  # torchvision's bounds
    x, y = corners[..., 0], corners[..., 1]
    assert x[:, [0, 3]].min() == 0 and x[:, [0, 3]].max() == bound_w - 1
    assert x[:, [1, 2]].min() == 56 - bound_w and x[:, [1, 2]].max() == 55
    assert y[:, [0, 1]].min() == 0 and y[:, [0, 1]].max() == bound_h - 1
    assert y[:, [2, 3]].min() == 40 - bound_h and y[:, [2, 3]].max() == 39
    assert 0.45 < params["apply"].double().mean() < 0.55


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [0, None])
def test_elastic_equals_torchvision_per_sample(dtype, device, interpolation, fill):
    batch = images(n=6, dtype=dtype, device=device)
    module = gpu.ElasticTransform(40.0, (4.0, 2.0), interpolation=interpolation, fill=fill)
    params = module.sample_params(batch.shape, batch.device)
    assert params["displacement"].shape == (6, 40, 56, 2)
    ours = module(batch, params=params)
    want = per_image(
        batch,
        lambda i, image: TF.elastic(
            image, params["displacement"][i : i + 1], InterpolationMode(interpolation), fill=fill
        ),
    )
    if device == "cpu":
        assert torch.equal(ours, want)
    else:
        assert ((ours.double() - want.double()).abs() > 1e-4 * 255).double().mean() < 0.01


def test_elastic_displacement_is_smooth_and_scaled_by_alpha():
    shape, cpu = torch.Size((64, 3, 40, 56)), torch.device("cpu")

    def roughness(field):  # neighbour differences against the field's own size
        return (field[:, :, 1:] - field[:, :, :-1]).abs().mean() / field.abs().mean()

    torch.manual_seed(0)
    smooth = gpu.ElasticTransform(alpha=(50.0, 10.0), sigma=5.0).sample_params(shape, cpu)
    raw = gpu.ElasticTransform(alpha=(50.0, 10.0), sigma=0.0).sample_params(shape, cpu)
    dx, dy = smooth["displacement"][..., 0], smooth["displacement"][..., 1]
    assert roughness(dx) < 0.2 * roughness(raw["displacement"][..., 0])
    assert raw["displacement"][..., 0].abs().max() <= 50 / 56  # uniform noise times alpha/w
    # the same blur on both axes: their sizes differ as alpha/width against alpha/height
    assert 2.5 < float(dx.std() / dy.std()) < 5.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (2, 3, 1, 5), (2, 3, 5, 1)])
def test_perspective_of_a_one_pixel_side_returns_the_images_unchanged(shape, dtype):
    # its corners collapse: the solver used to fail on a singular matrix
    batch = torch.arange(torch.Size(shape).numel()).view(shape).to(dtype)
    module = gpu.RandomPerspective(1.0, p=1.0, generator=torch.Generator().manual_seed(0))
    out = module(batch)
    assert out.shape == batch.shape and out.dtype == batch.dtype
    assert torch.equal(out, batch)
    params = module.sample_params(batch.shape, batch.device)
    assert not params["apply"].any() and params["coefficients"].isfinite().all()


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 3), height=st.integers(1, 12), width=st.integers(1, 12))
def test_any_batch_size_and_shape(n, height, width):
    batch = images(n=n, height=height, width=width)
    for module in (gpu.RandomPerspective(p=1.0), gpu.ElasticTransform(sigma=1.0)):
        out = module(batch)
        assert out.shape == batch.shape and out.dtype == batch.dtype


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gpu.RandomPerspective(1.5), r"distortion_scale must be in \[0, 1\], got 1.5"),
        (lambda: gpu.RandomPerspective(float("nan")), r"distortion_scale must be a finite"),
        (lambda: gpu.ElasticTransform(alpha=-1.0), r"alpha must be >= 0, got -1.0"),
        (lambda: gpu.ElasticTransform(sigma=(1.0, 2.0, 3.0)), r"sigma must be a number or"),
        (lambda: gpu.ElasticTransform(interpolation="bicubic"), r"nearest or bilinear"),
    ],
)
def test_bad_arguments_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()
