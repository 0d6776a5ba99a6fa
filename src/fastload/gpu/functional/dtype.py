"""The working precision of the kernels: uint8 images are computed in float32 on their
0..255 scale and rounded back; floating images stay on their 0..1 scale."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["back_to", "max_value", "restore", "to_float"]


def to_float(images: Tensor) -> Tensor:
    """float32 (float64 stays) on the image's own scale: 0..255 for uint8, 0..1 for floats.
    Grids and colour maths in half precision are visibly wrong, so never below float32."""
    return images if images.dtype == torch.float64 else images.to(torch.float32)


def restore(result: Tensor, dtype: torch.dtype) -> Tensor:
    """Back to the input's dtype; uint8 is rounded and clamped, not truncated."""
    if dtype == torch.uint8:
        return back_to(result.round_().clamp_(0, 255), torch.uint8)
    return result.to(dtype)


def max_value(dtype: torch.dtype) -> float:
    """The largest pixel value of ``dtype``: 255 for uint8, 1 for floats."""
    return 255.0 if dtype == torch.uint8 else 1.0


def back_to(values: Tensor, dtype: torch.dtype) -> Tensor:
    """``values.to(dtype)``, for float values already within ``dtype``'s range (uint8:
    [0, 255], truncated). On a CPU float32 or float64 to uint8 goes through NumPy, whose
    cast there is several times faster than torch's (benchmarks/timm_loader.py)."""
    if (
        dtype == torch.uint8
        and values.device.type == "cpu"
        and values.dtype in (torch.float32, torch.float64)
        and not values.requires_grad
    ):
        with np.errstate(invalid="ignore"):  # NaN: 0 as torch gives, without a warning
            return torch.from_numpy(values.numpy().astype(np.uint8))
    return values.to(dtype)
