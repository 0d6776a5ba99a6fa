"""Colour on the batch, a factor per sample: luma, RGB <-> HSV, and brightness, contrast,
saturation and hue as torchvision adjusts them (blended with black, the mean grey, the
grey image, and turned in HSV)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from fastload.gpu.functional.dtype import back_to, max_value
from fastload.gpu.functional.lookup import per_pixel

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "blend",
    "grayscale",
    "hsv_to_rgb",
    "rgb_to_hsv",
]

# ITU-R 601-2 luma, torchvision's weights.
_LUMA = (0.2989, 0.587, 0.114)


def _per_sample(factor: Tensor, dtype: torch.dtype) -> Tensor:
    return factor.to(dtype).view(-1, 1, 1, 1)


def grayscale(images: Tensor) -> Tensor:
    """(N, 1, H, W) float luma of RGB images (a single channel is its own luma); integer
    images' luma is floored, as torchvision's ``rgb_to_grayscale`` truncates it."""
    floating = images.is_floating_point()
    maths = images.dtype if floating else torch.float32
    if images.shape[1] == 1:
        return images.to(maths)
    r, g, b = images.to(maths).unbind(dim=1)
    luma = (r * _LUMA[0] + g * _LUMA[1] + b * _LUMA[2]).unsqueeze(1)
    return luma if floating else luma.floor_()


def rgb_to_hsv(rgb: Tensor) -> Tensor:
    """RGB in [0, 1] to HSV in [0, 1] (hue as a fraction of a turn), batched (N, 3, H, W)."""
    r, g, b = rgb.unbind(dim=1)
    maxc, _ = rgb.max(dim=1)
    minc, _ = rgb.min(dim=1)
    chroma = maxc - minc
    saturation = chroma / torch.where(maxc == 0, torch.ones_like(maxc), maxc)
    safe = torch.where(chroma == 0, torch.ones_like(chroma), chroma)
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    hue = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.where(chroma == 0, torch.zeros_like(hue), hue)
    hue = (hue / 6.0) % 1.0
    return torch.stack((hue, saturation, maxc), dim=1)


@functools.cache
def _sector_table(device: torch.device) -> Tensor:
    """For each of the six hue sectors, which of (v, q, p, t) each channel takes; made
    once per device, as a tensor built from a list is a blocking host-to-device copy."""
    rows = [[0, 3, 2], [1, 0, 2], [2, 0, 3], [2, 1, 0], [3, 2, 0], [0, 2, 1]]
    return torch.tensor(rows, device=device)


def hsv_to_rgb(hsv: Tensor) -> Tensor:
    """The inverse of :func:`rgb_to_hsv`, batched (N, 3, H, W)."""
    hue, saturation, value = hsv.unbind(dim=1)
    sector = torch.floor(hue * 6.0)
    fraction = hue * 6.0 - sector
    sector = sector.long() % 6
    p = (value * (1.0 - saturation)).clamp(0.0, 1.0)
    q = (value * (1.0 - saturation * fraction)).clamp(0.0, 1.0)
    t = (value * (1.0 - saturation * (1.0 - fraction))).clamp(0.0, 1.0)
    table = _sector_table(hsv.device)
    candidates = torch.stack((value, q, p, t), dim=1)  # (N, 4, H, W)
    choice = table[sector].permute(0, 3, 1, 2)  # (N, 3, H, W)
    return candidates.gather(1, choice)


def blend(images: Tensor, other: Tensor, factor: Tensor, *, bound: float | None = None) -> Tensor:
    """``factor * images + (1 - factor) * other`` with a factor (N,) per sample, clamped
    to ``[0, bound]`` (the dtype's range by default) and truncated back to an integer
    dtype, as torchvision blends. Both weights come from the factor in float64, as from
    torchvision's Python floats: ``1 - (1 + m)`` is then exactly ``-m``."""
    floating = images.is_floating_point()
    maths = images.dtype if floating else torch.float32
    keep = factor.double()
    out = images * _per_sample(keep, maths) + other.to(maths) * _per_sample(1 - keep, maths)
    out = out.clamp_(0, max_value(images.dtype) if bound is None else bound)
    return out if floating else back_to(out, images.dtype)


@per_pixel
def adjust_brightness(images: Tensor, factor: Tensor, *, bound: float | None = None) -> Tensor:
    """Each sample times its ``factor`` (a blend with black), clamped as :func:`blend`."""
    floating = images.is_floating_point()
    maths = images.dtype if floating else torch.float32
    out = (images.to(maths) * _per_sample(factor.double(), maths)).clamp_(
        0, max_value(images.dtype) if bound is None else bound
    )
    return out if floating else back_to(out, images.dtype)


def adjust_contrast(images: Tensor, factor: Tensor, *, bound: float | None = None) -> Tensor:
    """Each sample blended with its mean luma by its ``factor``."""
    mean = grayscale(images).mean(dim=(1, 2, 3), keepdim=True)
    return _blend_with_value(images, mean, factor, bound=bound)


_blend_with_value = per_pixel(blend)  # ``other`` one value per sample: a table per sample


def adjust_saturation(images: Tensor, factor: Tensor, *, bound: float | None = None) -> Tensor:
    """Each sample blended with its own grey image by its ``factor`` (one channel: as is)."""
    if images.shape[1] == 1:
        return images
    return blend(images, grayscale(images), factor, bound=bound)


def adjust_hue(images: Tensor, factor: Tensor, *, bound: float | None = None) -> Tensor:
    """Turn each sample's hue by its ``factor`` (a fraction of a turn, in [-0.5, 0.5]) on
    floating RGB images on the scale ``[0, bound]``."""
    scale = max_value(images.dtype) if bound is None else bound
    hsv = rgb_to_hsv(images / scale)
    hue = (hsv[:, 0] + factor.to(images.dtype).view(-1, 1, 1)) % 1.0
    return hsv_to_rgb(torch.stack((hue, hsv[:, 1], hsv[:, 2]), dim=1)) * scale
