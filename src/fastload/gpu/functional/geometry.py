"""Warps by a sampling grid per sample: affine (torchvision's inverse matrices and grid),
perspective and elastic, and the fill-aware sampling they share. A sample's result
equals ``torchvision.transforms.v2.functional``'s with its parameters."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from fastload.gpu.functional.dtype import back_to

__all__ = [
    "Fill",
    "affine",
    "affine_grid",
    "elastic",
    "inverse_affine_matrices",
    "perspective",
    "perspective_coefficients",
    "sample_grid",
]

#: Where a warp samples outside the image: one value, one per channel, or None for 0.
Fill = float | Sequence[float] | None


def _maths(images: Tensor) -> torch.dtype:
    return images.dtype if images.is_floating_point() else torch.float32


def sample_grid(images: Tensor, grid: Tensor, interpolation: str, fill: Fill) -> Tensor:
    """Sample each image at its grid (N, H', W', 2; -1..1, ``align_corners=False``), as
    torchvision's grid transform: pixels from outside become ``fill`` (on the image's
    scale; a coverage channel blends it in where bilinear sampling straddles the
    border), or 0 with ``fill=None``; uint8 is rounded back."""
    n, channels, height, width = images.shape
    if images.numel() == 0:
        return images.new_empty(n, channels, *grid.shape[1:3])
    floating = images.is_floating_point()
    maths = _maths(images)
    pixels = images if floating else images.to(maths)
    if fill is not None:
        pixels = torch.cat((pixels, pixels.new_ones(n, 1, height, width)), dim=1)
    pixels = F.grid_sample(
        pixels, grid.to(maths), mode=interpolation, padding_mode="zeros", align_corners=False
    )
    if fill is not None:
        pixels, coverage = pixels[:, :channels], pixels[:, channels:]
        values = torch.as_tensor(fill, dtype=maths, device=images.device).view(1, -1, 1, 1)
        if interpolation == "nearest":
            pixels = torch.where(coverage < 0.5, values.expand_as(pixels), pixels)
        else:
            pixels = (pixels - values) * coverage + values
    return pixels if floating else back_to(pixels.round_(), images.dtype)


def inverse_affine_matrices(
    angle: Tensor,
    translate: Tensor,
    scale: Tensor,
    shear: Tensor,
    center: Tensor | None = None,
) -> Tensor:
    """Per sample, the (2, 3) matrix mapping output pixels to input pixels (origin at the
    image centre), as torchvision computes it: ``angle`` (N,) in degrees, ``translate``
    (N, 2) in pixels, ``scale`` (N,), ``shear`` (N, 2) in degrees, ``center`` (N, 2)
    relative to the image centre (default 0)."""
    angle, translate, scale, shear = (t.double() for t in (angle, translate, scale, shear))
    rot, sx, sy = torch.deg2rad(angle), torch.deg2rad(shear[:, 0]), torch.deg2rad(shear[:, 1])
    center = torch.zeros_like(translate) if center is None else center.double()
    cx, cy = center[:, 0], center[:, 1]
    cx_plus_tx, cy_plus_ty = cx + translate[:, 0], cy + translate[:, 1]
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    m2 = cx - m0 * cx_plus_tx - m1 * cy_plus_ty
    m5 = cy - m3 * cx_plus_tx - m4 * cy_plus_ty
    return torch.stack((m0, m1, m2, m3, m4, m5), dim=1).view(-1, 2, 3)


def affine(
    images: Tensor, matrices: Tensor, interpolation: str = "nearest", fill: Fill = 0
) -> Tensor:
    """Warp each image by its inverse matrix (from :func:`inverse_affine_matrices`); pixels
    from outside become ``fill`` (on the image's scale), or 0 with ``fill=None``."""
    _, _, height, width = images.shape
    grid = affine_grid(matrices.to(_maths(images)), height, width)
    return sample_grid(images, grid, interpolation, fill)


def affine_grid(matrices: Tensor, height: int, width: int) -> Tensor:
    """torchvision's affine grid for (N, 2, 3) matrices: pixel centres relative to the
    image centre, mapped, then normalised by half the size."""
    dtype, device = matrices.dtype, matrices.device
    base = torch.empty(1, height, width, 3, dtype=dtype, device=device)
    xs = torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, width, device=device)
    ys = torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, height, device=device)
    base[..., 0].copy_(xs)
    base[..., 1].copy_(ys.unsqueeze(-1))
    base[..., 2].fill_(1)
    halves = torch.tensor([0.5 * width, 0.5 * height], dtype=dtype, device=device)
    rescaled = matrices.transpose(1, 2) / halves
    grid = base.view(1, height * width, 3).expand(len(matrices), -1, -1).bmm(rescaled)
    return grid.view(len(matrices), height, width, 2)


def perspective_coefficients(startpoints: Tensor, endpoints: Tensor) -> Tensor:
    """Per sample, the 8 coefficients mapping ``endpoints`` (N, 4, 2: x, y of the output's
    corners) back to ``startpoints``, solved in float64 and rounded to float32 as
    torchvision solves them."""
    start, end = startpoints.double(), endpoints.double()
    n = len(end)
    a = end.new_zeros(n, 8, 8)
    x, y = end[..., 0], end[..., 1]
    a[:, 0::2, 0], a[:, 0::2, 1], a[:, 0::2, 2] = x, y, 1
    a[:, 1::2, 3], a[:, 1::2, 4], a[:, 1::2, 5] = x, y, 1
    a[:, 0::2, 6], a[:, 0::2, 7] = -start[..., 0] * x, -start[..., 0] * y
    a[:, 1::2, 6], a[:, 1::2, 7] = -start[..., 1] * x, -start[..., 1] * y
    solved: Tensor = torch.linalg.solve(a, start.reshape(n, 8))
    return solved.to(torch.float32)


def perspective(images: Tensor, coefficients: Tensor, interpolation: str, fill: Fill) -> Tensor:
    """Warp each image by its perspective ``coefficients`` (N, 8), torchvision's grid."""
    n, _, height, width = images.shape
    maths = _maths(images)
    c = coefficients.to(maths)
    ones = torch.ones(n, device=c.device, dtype=maths)
    theta1 = torch.stack((c[:, 0:3], c[:, 3:6]), dim=1)  # (N, 2, 3)
    theta2 = torch.stack((c[:, 6], c[:, 7], ones), dim=1).unsqueeze(1).expand(n, 2, 3)
    base = torch.empty(1, height, width, 3, dtype=maths, device=c.device)
    base[..., 0].copy_(torch.linspace(0.5, width - 0.5, width, dtype=maths, device=c.device))
    ys = torch.linspace(0.5, height - 0.5, height, dtype=maths, device=c.device)
    base[..., 1].copy_(ys.unsqueeze(-1))
    base[..., 2].fill_(1)
    halves = torch.tensor([0.5 * width, 0.5 * height], dtype=maths, device=c.device)
    flat = base.view(1, height * width, 3).expand(n, -1, -1)
    grid = flat.bmm(theta1.transpose(1, 2) / halves) / flat.bmm(theta2.transpose(1, 2)) - 1.0
    return sample_grid(images, grid.view(n, height, width, 2), interpolation, fill)


def elastic(images: Tensor, displacement: Tensor, interpolation: str, fill: Fill) -> Tensor:
    """Move each pixel's sampling point by its ``displacement`` (N, H, W, 2, in grid units),
    as torchvision's ``elastic``."""
    height, width = images.shape[-2:]
    maths = _maths(images)
    device = images.device
    identity = torch.empty(1, height, width, 2, dtype=maths, device=device)
    xs = torch.linspace((1 - width) / width, (width - 1) / width, width, dtype=maths, device=device)
    ys = torch.linspace(
        (1 - height) / height, (height - 1) / height, height, dtype=maths, device=device
    )
    identity[..., 0].copy_(xs)
    identity[..., 1].copy_(ys.unsqueeze(-1))
    return sample_grid(images, identity + displacement.to(maths), interpolation, fill)
