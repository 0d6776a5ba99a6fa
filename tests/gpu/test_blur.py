"""GaussianBlur against torchvision."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from fastload import gpu
from gpu_cases import (
    assert_parity,
    images,
    per_image,
)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("kernel_size", [3, (5, 9)])
def test_gaussian_blur_matches_torchvision(dtype, kernel_size):
    batch = images(dtype=dtype)
    module = gpu.GaussianBlur(kernel_size, sigma=(0.3, 3.0))
    params = module.sample_params(batch.shape, batch.device)
    sizes = [kernel_size] * 2 if isinstance(kernel_size, int) else list(kernel_size)
    reference = per_image(
        batch, lambda i, x: TF.gaussian_blur(x, sizes, [params["sigma"][i].item()] * 2)
    )
    assert_parity(module(batch, params=params), reference, dtype)
