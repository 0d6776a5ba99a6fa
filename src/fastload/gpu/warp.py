"""Warps on the batch by a sampling grid per sample: the fill-aware sampling that every
geometric warp shares, RandomPerspective and ElasticTransform, with torchvision v2's
arguments, grids and fill, so that a sample's result equals torchvision's for its
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torch.nn import functional as F
from torchvision.transforms import InterpolationMode

from fastload.gpu.base import BatchTransform, Params, blend_where, check_probability, finite

__all__ = [
    "ElasticTransform",
    "Fill",
    "RandomPerspective",
    "check_fill",
    "elastic",
    "interpolation_name",
    "perspective",
    "perspective_coefficients",
    "sample_grid",
]

Fill = float | Sequence[float] | None


def sample_grid(images: Tensor, grid: Tensor, interpolation: str, fill: Fill) -> Tensor:
    """Sample each image at its grid (N, H', W', 2; -1..1, ``align_corners=False``), as
    torchvision's ``_apply_grid_transform``: pixels from outside become ``fill`` (on the
    image's scale; a coverage channel blends it in where bilinear sampling straddles the
    border), or 0 with ``fill=None``; uint8 is rounded back."""
    n, channels, height, width = images.shape
    if images.numel() == 0:
        return images.new_empty(n, channels, *grid.shape[1:3])
    floating = images.is_floating_point()
    maths = images.dtype if floating else torch.float32
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
    return pixels if floating else pixels.round_().to(images.dtype)


def interpolation_name(value: InterpolationMode | str) -> str:
    name = value.value if isinstance(value, InterpolationMode) else str(value)
    if name not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be nearest or bilinear, got {value!r}")
    return name


def check_fill(fill: Fill) -> Fill:
    if fill is None or isinstance(fill, (int, float)):
        return None if fill is None else finite(fill, "fill")
    return [finite(value, "fill") for value in fill]


def perspective_coefficients(startpoints: Tensor, endpoints: Tensor) -> Tensor:
    """Per sample, the 8 coefficients mapping ``endpoints`` (N, 4, 2: x, y of the output's
    corners) back to ``startpoints``, solved in float64 and rounded to float32 as
    torchvision's ``_get_perspective_coeffs``."""
    start, end = startpoints.double(), endpoints.double()
    n = len(end)
    a = end.new_zeros(n, 8, 8)
    x, y = end[..., 0], end[..., 1]
    a[:, 0::2, 0], a[:, 0::2, 1], a[:, 0::2, 2] = x, y, 1
    a[:, 1::2, 3], a[:, 1::2, 4], a[:, 1::2, 5] = x, y, 1
    a[:, 0::2, 6], a[:, 0::2, 7] = -start[..., 0] * x, -start[..., 0] * y
    a[:, 1::2, 6], a[:, 1::2, 7] = -start[..., 1] * x, -start[..., 1] * y
    return torch.linalg.solve(a, start.reshape(n, 8)).to(torch.float32)


def perspective(images: Tensor, coefficients: Tensor, interpolation: str, fill: Fill) -> Tensor:
    """Warp each image by its perspective ``coefficients`` (N, 8), torchvision's grid."""
    n, _, height, width = images.shape
    maths = images.dtype if images.is_floating_point() else torch.float32
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
    maths = images.dtype if images.is_floating_point() else torch.float32
    device = images.device
    identity = torch.empty(1, height, width, 2, dtype=maths, device=device)
    xs = torch.linspace((1 - width) / width, (width - 1) / width, width, dtype=maths, device=device)
    ys = torch.linspace((1 - height) / height, (height - 1) / height, height, dtype=maths,
                        device=device)  # fmt: skip
    identity[..., 0].copy_(xs)
    identity[..., 1].copy_(ys.unsqueeze(-1))
    return sample_grid(images, identity + displacement.to(maths), interpolation, fill)


class RandomPerspective(BatchTransform):
    """Move each image's corners inwards at random (up to ``distortion_scale`` of half the
    size) and warp it to match, for each sample with probability ``p``; torchvision v2's
    arguments and corner draws."""

    def __init__(
        self,
        distortion_scale: float = 0.5,
        p: float = 0.5,
        interpolation: InterpolationMode | str = InterpolationMode.BILINEAR,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(p=check_probability(p), same_on_batch=same_on_batch, generator=generator)
        self.distortion_scale = finite(distortion_scale, "distortion_scale")
        if not 0 <= self.distortion_scale <= 1:
            raise ValueError(f"distortion_scale must be in [0, 1], got {distortion_scale!r}")
        self.interpolation = interpolation_name(interpolation)
        self.fill = check_fill(fill)

    def sample_params(self, shape, device, generator=None) -> Params:
        n, height, width = shape[0], shape[-2], shape[-1]
        bound_h = int(self.distortion_scale * (height // 2)) + 1
        bound_w = int(self.distortion_scale * (width // 2)) + 1
        draws = self._rand(n, 4, 2, device=device, generator=generator)
        # corners (tl, tr, br, bl): x within bound_w of its side, y within bound_h of its own
        low = torch.tensor(
            [[0, 0], [width - bound_w, 0], [width - bound_w, height - bound_h],
             [0, height - bound_h]], device=device,
        )  # fmt: skip
        span = torch.tensor([bound_w, bound_h], device=device)
        endpoints = low + (draws * span).long().clamp_(max=span - 1)
        start = torch.tensor(
            [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]], device=device
        ).expand(n, 4, 2)
        return {
            "apply": self._applies(n, device, generator),
            "endpoints": endpoints,
            "coefficients": perspective_coefficients(start, endpoints),
        }

    targets = "transform"

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        warped = perspective(images, params["coefficients"], self.interpolation, self.fill)
        return blend_where(params["apply"], warped, images)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        grid = masks.unsqueeze(1) if masks.dim() == 3 else masks
        warped = perspective(grid, params["coefficients"], "nearest", 0)  # background 0
        moved = blend_where(params["apply"], warped, grid)
        return moved.squeeze(1) if masks.dim() == 3 else moved

    def transform_target(self, target, params: Params, size):
        if not bool(params["apply"]):
            return target
        height, width = size
        corners = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        return TF.perspective(target, corners, params["endpoints"].tolist())


class ElasticTransform(BatchTransform):
    """Displace each image's pixels by its own smooth random field: uniform noise blurred
    with a Gaussian of ``sigma``, scaled by ``alpha`` (torchvision v2's draw; numbers or
    (x, y) pairs)."""

    def __init__(
        self,
        alpha: float | Sequence[float] = 50.0,
        sigma: float | Sequence[float] = 5.0,
        interpolation: InterpolationMode | str = InterpolationMode.BILINEAR,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.alpha, self.sigma = _xy(alpha, "alpha"), _xy(sigma, "sigma")
        self.interpolation = interpolation_name(interpolation)
        self.fill = check_fill(fill)

    def sample_params(self, shape, device, generator=None) -> Params:
        n, height, width = shape[0], shape[-2], shape[-1]
        fields = []
        for axis, extent in ((0, width), (1, height)):
            field = self._rand(n, 1, height, width, device=device, generator=generator) * 2 - 1
            if self.sigma[axis] > 0:
                size = int(8 * self.sigma[axis] + 1) | 1  # odd, as torchvision makes it
                # reflect padding needs a kernel under twice the image: torchvision raises
                # on smaller images; here the kernel is cut to fit
                size = min(size, 2 * min(height, width) - 1)
                field = TF.gaussian_blur(field.contiguous(), [size, size], list(self.sigma))
            fields.append(field * self.alpha[axis] / extent)
        return {"displacement": torch.cat(fields, dim=1).permute(0, 2, 3, 1)}

    targets = "transform"

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return elastic(images, params["displacement"], self.interpolation, self.fill)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        grid = masks.unsqueeze(1) if masks.dim() == 3 else masks
        moved = elastic(grid, params["displacement"], "nearest", 0)  # background 0
        return moved.squeeze(1) if masks.dim() == 3 else moved

    def transform_target(self, target, params: Params, size):
        return TF.elastic(target, params["displacement"].unsqueeze(0))


def _xy(value: float | Sequence[float], name: str) -> tuple[float, float]:
    values = (value, value) if isinstance(value, (int, float)) else tuple(value)
    if len(values) != 2:
        raise ValueError(f"{name} must be a number or an (x, y) pair, got {value!r}")
    x, y = (finite(v, name) for v in values)
    if x < 0 or y < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return x, y
