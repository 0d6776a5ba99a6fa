"""Per-pixel operations on the batch, a magnitude (N,) per sample where there is one:
invert, posterize, solarize, sharpness, autocontrast, equalize, Gaussian noise and
erasing, with torchvision v2's meanings. Autocontrast and equalisation are
torchvision's own kernels, which already give each image and channel its own
statistics."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torch.nn import functional as F

from fastload.gpu.functional.dtype import back_to, max_value
from fastload.gpu.functional.lookup import per_pixel

__all__ = [
    "add_noise",
    "adjust_sharpness",
    "autocontrast",
    "equalize",
    "erase",
    "invert",
    "posterize",
    "solarize",
]


def _per_sample(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def invert(images: Tensor) -> Tensor:
    """``255 - x`` (uint8) or ``1 - x`` (floats)."""
    out: Tensor = TF.invert(images)
    return out


def posterize(images: Tensor, bits: Tensor) -> Tensor:
    """Keep each sample's top ``bits[i]`` bits (0 to 8) of every channel value."""
    if images.is_floating_point():  # torchvision's float form: that many levels on 0..1
        levels = _per_sample(torch.pow(2.0, bits.to(images.dtype)))
        return (images * levels).floor_().clamp_(min=0).minimum(levels - 1).div_(levels)
    shift = 8 - bits.to(torch.int64)
    mask = torch.bitwise_left_shift(torch.full_like(shift, 255), shift) & 255
    return images & _per_sample(mask.to(torch.uint8))


@per_pixel
def solarize(images: Tensor, threshold: Tensor) -> Tensor:
    """Invert the values at or above each sample's ``threshold`` (on the image's scale)."""
    at_or_above = images >= _per_sample(threshold.to(torch.float64))  # not rounded to uint8
    return torch.where(at_or_above, invert(images), images)


def adjust_sharpness(images: Tensor, factor: Tensor) -> Tensor:
    """Blend each sample with its 3x3-smoothed self (PIL's kernel, borders kept) by
    ``factor[i]``: 0 blurs, 1 is the identity, 2 sharpens; as torchvision rounds and
    truncates uint8."""
    height, width = images.shape[-2:]
    if images.numel() == 0 or height <= 2 or width <= 2:
        return images
    channels, floating = images.shape[1], images.is_floating_point()
    maths = images.dtype if floating else torch.float32
    kernel = torch.full((3, 3), 1 / 13, dtype=maths, device=images.device)
    kernel[1, 1] = 5 / 13
    out = images.to(maths, copy=True)
    blurred = F.conv2d(out, kernel.expand(channels, 1, 3, 3), groups=channels)
    if not floating:
        blurred = blurred.round_()
    inner = out[..., 1:-1, 1:-1]
    inner.add_((blurred - inner) * _per_sample((1 - factor.double()).to(maths)))
    out = out.clamp_(0, max_value(images.dtype))
    return out if floating else back_to(out, images.dtype)


def autocontrast(images: Tensor) -> Tensor:
    """Stretch each image's channels to the full range (torchvision's kernel)."""
    out: Tensor = TF.autocontrast(images)
    return out


def equalize(images: Tensor) -> Tensor:
    """Equalise each image's channel histograms (torchvision's kernel, PIL's lookup)."""
    out: Tensor = TF.equalize(images)
    return out


def add_noise(
    images: Tensor, noise: Tensor, *, mean: float = 0.0, sigma: float = 0.1, clip: bool = True
) -> Tensor:
    """``images + mean + sigma * noise`` on the 0..1 scale (standard normal ``noise`` of
    the images' shape), clipped to the valid range if ``clip``; uint8 as torchvision adds
    it (noise scaled by 255 and truncated to integers)."""
    if images.is_floating_point():
        out = images + (mean + noise.to(images.dtype) * sigma)
        return out.clamp(0, 1) if clip else out
    shifts = (255 * mean + noise * (255 * sigma)).to(torch.int16)
    summed = images + shifts
    return (summed.clamp(0, 255) if clip else summed).to(torch.uint8)


def erase(images: Tensor, mask: Tensor, value: Sequence[float]) -> Tensor:
    """``value`` (one, or one per channel) where ``mask`` (N, 1, H, W) is set."""
    if len(value) == 1:  # a Python scalar: nothing to copy to the device
        return torch.where(mask, torch.tensor(value[0], dtype=images.dtype), images)
    return torch.where(mask, _fill(tuple(value), images.device, images.dtype), images)


@functools.cache
def _fill(value: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> Tensor:
    """Per-channel fill values, made once per device and dtype (a tensor built from a
    list is a blocking host-to-device copy)."""
    return torch.tensor(value, device=device).to(dtype).view(1, -1, 1, 1)
