"""Affine geometry on the batch: RandomAffine and RandomRotation with torchvision v2's
arguments, a different matrix per sample, one grid and one ``grid_sample`` call (the
kernels of :mod:`fastload.gpu.functional.geometry`), so that a sample's result equals
``v2.functional.affine`` with its parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torchvision.transforms import InterpolationMode

from fastload._checks import finite, pair
from fastload.gpu.arguments import resampling, symmetric
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import Fill, affine, inverse_affine_matrices

__all__ = ["RandomAffine", "RandomRotation"]


class _RandomAffineBase(BatchTransform):
    """What RandomAffine and RandomRotation share: each sample's inverse matrix
    (``matrices``) warps its image with ``interpolation`` and ``fill``, and its masks
    nearest, with 0 (background) where they come from outside."""

    targets = "transform"

    def __init__(
        self,
        interpolation: InterpolationMode | str,
        fill: Fill,
        center: Sequence[float] | None,
        *,
        same_on_batch: bool,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.interpolation, self.fill = resampling(interpolation, fill)
        self.center = None if center is None else [finite(c, "center") for c in center]

    def _matrices(self, shape: torch.Size, params: Params, device: torch.device) -> Tensor:
        """(N, 2, 3) inverse matrices for a batch of ``shape``."""
        raise NotImplementedError

    def _center(self, shape: torch.Size, device: torch.device) -> Tensor | None:
        """``center`` in pixels (x, y), as torchvision takes it, relative to the image's."""
        if self.center is None:
            return None
        height, width = shape[-2:]
        x, y = self.center[0] - 0.5 * width, self.center[1] - 0.5 * height
        return torch.tensor([x, y], device=device).expand(shape[0], 2)

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        matrices = self._matrices(images.shape, params, images.device)
        return affine(images, matrices, self.interpolation, self.fill)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        return affine(masks, self._matrices(masks.shape, params, masks.device), "nearest", 0)


class RandomAffine(_RandomAffineBase):
    """A random affine transformation of each image: rotation, translation, scale, shear.

    torchvision v2's arguments and sampling; each sample its own matrix.

    ``degrees``, ``shear``: a number ``d`` for (-d, d) or a (min, max) range (``shear``
    also (x_min, x_max, y_min, y_max)); ``translate``: maximum fractions (a, b) of the
    width and height; ``scale``: a (min, max) range. ``fill`` is on the image's own
    scale (0..255 for uint8), one value or one per channel.

    Args:
        degrees: The rotation's range, counter-clockwise: ``d`` for (-d, d), or (min, max).
        translate: The largest shifts, as fractions (a, b) of the width and height; None
            for none.
        scale: The (min, max) range of the scale factor; None keeps the size.
        shear: Degrees: ``d`` for (-d, d) along x, (min, max) along x, or (x_min, x_max,
            y_min, y_max); None for none.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``).
        fill: The value of pixels that come from outside the image.
        center: The centre of the rotation (x, y) in pixels; None: the image's centre.
        same_on_batch: One matrix for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A negative ``degrees`` number or a range with min > max, ``translate``
            not two fractions in [0, 1], a ``scale`` that is not positive, a ``shear`` of
            another length, an ``interpolation`` other than nearest or bilinear, or a
            ``fill`` or ``center`` that is not finite.

    Example:
        >>> images = torch.arange(9, dtype=torch.uint8).view(1, 1, 3, 3)
        >>> RandomAffine(degrees=(180, 180))(images)[0, 0].tolist()
        [[8, 7, 6], [5, 4, 3], [2, 1, 0]]
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
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            interpolation, fill, center, same_on_batch=same_on_batch, generator=generator
        )
        self.degrees = symmetric(degrees, "degrees")
        self.translate: tuple[float, float] | None = None
        if translate is not None:
            if len(translate) != 2:
                raise ValueError(f"translate must be (a, b) fractions, got {translate!r}")
            self.translate = (finite(translate[0], "translate"), finite(translate[1], "translate"))
            if not all(0 <= t <= 1 for t in self.translate):
                raise ValueError(f"translate fractions must be in [0, 1], got {translate!r}")
        self.scale = None if scale is None else pair(scale, "scale")
        if self.scale is not None and self.scale[0] <= 0:
            raise ValueError(f"scale must be positive, got {scale!r}")
        self.shear = None if shear is None else _shear(shear)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
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

    def _matrices(self, shape: torch.Size, params: Params, device: torch.device) -> Tensor:
        return inverse_affine_matrices(
            params["angle"],
            params["translate"],
            params["scale"],
            params["shear"],
            self._center(shape, device),
        )

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        return TF.affine(
            target, angle=params["angle"], translate=params["translate"], scale=params["scale"],
            shear=params["shear"], center=self.center,
        )  # fmt: skip


class RandomRotation(_RandomAffineBase):
    """Rotate each image by its own angle drawn from ``degrees``, counter-clockwise.

    ``degrees`` is a number ``d`` for (-d, d), or a range; the rotation is about
    ``center`` (default: the image's). ``expand`` would give each sample its own size,
    which a batch cannot hold.

    Args:
        degrees: ``d`` for (-d, d), or a (min, max) range of angles.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``).
        expand: Only False: a batch holds one size.
        center: The centre of the rotation (x, y) in pixels; None: the image's centre.
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel.
        same_on_batch: One angle for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: ``expand=True``, a negative ``degrees`` number or a range with
            min > max, an ``interpolation`` other than nearest or bilinear, or a ``fill``
            or ``center`` that is not finite.

    Example:
        >>> images = torch.arange(9, dtype=torch.uint8).view(1, 1, 3, 3)
        >>> RandomRotation(degrees=(90, 90))(images)[0, 0].tolist()
        [[2, 5, 8], [1, 4, 7], [0, 3, 6]]
    """

    def __init__(
        self,
        degrees: float | Sequence[float],
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        expand: bool = False,
        center: Sequence[float] | None = None,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        if expand:
            raise ValueError(
                "RandomRotation(expand=True) gives every angle its own output size, which one "
                "batch cannot hold: rotate without expanding, or crop/resize afterwards"
            )
        super().__init__(
            interpolation, fill, center, same_on_batch=same_on_batch, generator=generator
        )
        self.degrees = symmetric(degrees, "degrees")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {"angle": self._uniform(shape[0], *self.degrees, device=device, generator=generator)}

    def _matrices(self, shape: torch.Size, params: Params, device: torch.device) -> Tensor:
        n = shape[0]
        none = torch.zeros(n, 2, device=device)
        # torchvision's rotate turns the other way from its affine: the angle is negated
        return inverse_affine_matrices(
            -params["angle"], none, torch.ones(n, device=device), none, self._center(shape, device)
        )

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        return TF.rotate(target, params["angle"], center=self.center)


def _shear(value: float | Sequence[float]) -> tuple[float, ...]:
    if isinstance(value, (int, float)):
        return symmetric(value, "shear")
    if len(value) == 2:
        return pair(value, "shear")
    if len(value) == 4:
        return (*pair(value[:2], "shear"), *pair(value[2:], "shear"))
    raise ValueError(f"shear must be a number, or 2 or 4 values, got {value!r}")
