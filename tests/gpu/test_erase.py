"""RandomErasing against torchvision's erase."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from fastload import gpu
from gpu_cases import (
    images,
    per_image,
)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_erasing_equals_torchvision_erase(dtype):
    batch = images(n=16, dtype=dtype)
    module = gpu.RandomErasing(p=0.7, value=(9, 8, 7) if dtype == torch.uint8 else (0.1, 0.2, 0.3))
    params = module.sample_params(batch.shape, batch.device)
    fill = torch.tensor(module.value).view(3, 1, 1).to(dtype)

    def one(i, x):
        if not params["apply"][i]:
            return x
        top, left, height, width = (int(params[k][i]) for k in ("top", "left", "height", "width"))
        return TF.erase(x, top, left, height, width, fill)

    assert torch.equal(module(batch, params=params), per_image(batch, one))
