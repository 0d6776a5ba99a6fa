"""Affine geometry on the batch: RandomAffine and RandomRotation with torchvision v2's
arguments, a different matrix per sample, one grid and one ``grid_sample`` call (the
kernels of :mod:`fastload.gpu.functional.geometry`), so that a sample's result equals
``v2.functional.affine`` with its parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torchvision.transforms import InterpolationMode

from fastload._checks import finite, pair
from fastload.gpu.arguments import check_fill, interpolation_name, symmetric
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import Fill, affine, inverse_affine_matrices

__all__ = ["RandomAffine", "RandomRotation"]


def _center(center: Sequence[float] | None, shape: torch.Size, device) -> Tensor | None:
    """A centre in pixels (x, y), as torchvision takes it, relative to the image centre."""
    if center is None:
        return None
    height, width = shape[-2:]
    offset = torch.tensor([center[0] - 0.5 * width, center[1] - 0.5 * height], device=device)
    return offset.expand(shape[0], 2)


class RandomAffine(BatchTransform):
    """A random affine transformation of each image (rotation, translation, scale, shear),
    with torchvision v2's arguments and sampling; each sample its own matrix.

    ``degrees``, ``shear``: a number ``d`` for (-d, d) or a (min, max) range (``shear``
    also (x_min, x_max, y_min, y_max)); ``translate``: maximum fractions (a, b) of the
    width and height; ``scale``: a (min, max) range. ``fill`` is on the image's own
    scale (0..255 for uint8), one value or one per channel.
    """

    def __init__(
        self,
        degrees: float | Sequence[float],
        translate: Sequence[float] | None = None,
        scale: Sequence[float] | None = None,
        shear: float | Sequence[float] | None = None,
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        fill: Fill = 0,
        center: Sequence[float] | None = None,
        *,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.degrees = symmetric(degrees, "degrees")
        self.translate = None
        if translate is not None:
            if len(translate) != 2:
                raise ValueError(f"translate must be (a, b) fractions, got {translate!r}")
            self.translate = tuple(finite(t, "translate") for t in translate)
            if not all(0 <= t <= 1 for t in self.translate):
                raise ValueError(f"translate fractions must be in [0, 1], got {translate!r}")
        self.scale = None if scale is None else pair(scale, "scale")
        if self.scale is not None and self.scale[0] <= 0:
            raise ValueError(f"scale must be positive, got {scale!r}")
        self.shear = None if shear is None else _shear(shear)
        self.interpolation = interpolation_name(interpolation)
        self.fill = check_fill(fill)
        self.center = None if center is None else [finite(c, "center") for c in center]

    def sample_params(self, shape, device, generator=None) -> Params:
        n, height, width = shape[0], shape[-2], shape[-1]

        def uniform(low: float, high: float) -> Tensor:
            return self._uniform(n, low, high, device=device, generator=generator)

        zeros = torch.zeros(n, device=device)
        translate = torch.zeros(n, 2, device=device)
        if self.translate is not None:  # torchvision rounds the shift to whole pixels
            max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
            translate = torch.stack((uniform(-max_dx, max_dx), uniform(-max_dy, max_dy)), 1).round()
        shear = torch.zeros(n, 2, device=device)
        if self.shear is not None:
            shear_y = uniform(*self.shear[2:]) if len(self.shear) == 4 else zeros
            shear = torch.stack((uniform(*self.shear[:2]), shear_y), dim=1)
        return {
            "angle": uniform(*self.degrees),
            "translate": translate,
            "scale": zeros + 1 if self.scale is None else uniform(*self.scale),
            "shear": shear,
        }

    targets = "transform"

    def _matrices(self, shape: torch.Size, params: Params, device) -> Tensor:
        center = _center(self.center, shape, device)
        return inverse_affine_matrices(
            params["angle"], params["translate"], params["scale"], params["shear"], center
        )

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        matrices = self._matrices(images.shape, params, images.device)
        return affine(images, matrices, self.interpolation, self.fill)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        # nearest, and 0 (background) where the mask comes from outside, whatever ``fill``
        grid = masks.unsqueeze(1) if masks.dim() == 3 else masks
        moved = affine(grid, self._matrices(grid.shape, params, masks.device), "nearest", 0)
        return moved.squeeze(1) if masks.dim() == 3 else moved

    def transform_target(self, target, params: Params, size):
        return TF.affine(
            target, angle=float(params["angle"]), translate=params["translate"].tolist(),
            scale=float(params["scale"]), shear=params["shear"].tolist(), center=self.center,
        )  # fmt: skip


class RandomRotation(BatchTransform):
    """Rotate each image by its own angle drawn from ``degrees`` (a number ``d`` for
    (-d, d), or a range), counter-clockwise, about ``center`` (default: the image's).
    ``expand`` would give each sample its own size, which a batch cannot hold."""

    def __init__(
        self,
        degrees: float | Sequence[float],
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        expand: bool = False,
        center: Sequence[float] | None = None,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        if expand:
            raise ValueError(
                "RandomRotation(expand=True) gives every angle its own output size, which one "
                "batch cannot hold: rotate without expanding, or crop/resize afterwards"
            )
        self.degrees = symmetric(degrees, "degrees")
        self.interpolation = interpolation_name(interpolation)
        self.center = None if center is None else [finite(c, "center") for c in center]
        self.fill = check_fill(fill)

    def sample_params(self, shape, device, generator=None) -> Params:
        return {"angle": self._uniform(shape[0], *self.degrees, device=device, generator=generator)}

    targets = "transform"

    def _matrices(self, shape: torch.Size, params: Params, device) -> Tensor:
        n = shape[0]
        none = torch.zeros(n, 2, device=device)
        center = _center(self.center, shape, device)
        # torchvision's rotate turns the other way from its affine: the angle is negated
        return inverse_affine_matrices(
            -params["angle"], none, torch.ones(n, device=device), none, center
        )

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        grid = masks.unsqueeze(1) if masks.dim() == 3 else masks
        moved = affine(grid, self._matrices(grid.shape, params, masks.device), "nearest", 0)
        return moved.squeeze(1) if masks.dim() == 3 else moved

    def transform_target(self, target, params: Params, size):
        return TF.rotate(target, float(params["angle"]), center=self.center)

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        matrices = self._matrices(images.shape, params, images.device)
        return affine(images, matrices, self.interpolation, self.fill)


def _shear(value: float | Sequence[float]) -> tuple[float, ...]:
    if isinstance(value, (int, float)):
        return symmetric(value, "shear")
    if len(value) == 2:
        return pair(value, "shear")
    if len(value) == 4:
        return (*pair(value[:2], "shear"), *pair(value[2:], "shear"))
    raise ValueError(f"shear must be a number, or 2 or 4 values, got {value!r}")
