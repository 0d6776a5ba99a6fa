"""Warps on the batch by a sampling grid per sample: RandomPerspective and
ElasticTransform, with torchvision v2's arguments, grids and fill (the kernels of
:mod:`fastload.gpu.functional.geometry`), so that a sample's result equals
torchvision's for its parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode

from fastload._checks import finite
from fastload.gpu.arguments import resampling, xy
from fastload.gpu.base import BatchTransform, Params, blend_where
from fastload.gpu.functional import Fill, elastic, perspective, perspective_coefficients

__all__ = ["ElasticTransform", "RandomPerspective"]


class RandomPerspective(BatchTransform):
    """Move each image's corners inwards at random and warp the image to match.

    Each corner moves up to ``distortion_scale`` of half the size, for each sample with
    probability ``p``; torchvision v2's arguments and corner draws. An image one pixel
    high or wide is returned unchanged.

    Args:
        distortion_scale: How far the corners may move, 0 to 1.
        p: Probability of warping each image.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``).
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel.
        same_on_batch: One set of corners for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``distortion_scale`` outside [0, 1], ``p`` not a probability, an
            ``interpolation`` other than nearest or bilinear, or a ``fill`` that is not
            finite.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> warped = RandomPerspective(distortion_scale=0.5, p=1.0)(torch.ones(2, 1, 8, 8))
        >>> (warped == 0).any(dim=(1, 2, 3)).tolist()  # corners filled with 0
        [True, True]
    """

    targets = "transform"

    def __init__(
        self,
        distortion_scale: float = 0.5,
        p: float = 0.5,
        interpolation: InterpolationMode | str = InterpolationMode.BILINEAR,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p, same_on_batch=same_on_batch, generator=generator)
        self.interpolation, self.fill = resampling(interpolation, fill)
        self.distortion_scale = finite(distortion_scale, "distortion_scale")
        if not 0 <= self.distortion_scale <= 1:
            raise ValueError(f"distortion_scale must be in [0, 1], got {distortion_scale!r}")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
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
        apply = self._applies(n, device, generator)
        if height < 2 or width < 2:
            # the corners of a 1-pixel side collapse onto each other: no perspective maps
            # them (the solver would fail on a singular matrix), and nothing is to distort;
            # the draws above are still made, so the generator moves as for any size
            identity = torch.tensor([1.0, 0, 0, 0, 1, 0, 0, 0], device=device)
            return {
                "apply": torch.zeros_like(apply),
                "endpoints": start.clone(),
                "coefficients": identity.expand(n, 8).clone(),
            }
        return {
            "apply": apply,
            "endpoints": endpoints,
            "coefficients": perspective_coefficients(start, endpoints),
        }

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        warped = perspective(images, params["coefficients"], self.interpolation, self.fill)
        return blend_where(params["apply"], warped, images)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        warped = perspective(masks, params["coefficients"], "nearest", 0)  # background 0
        return blend_where(params["apply"], warped, masks)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        if not params["apply"]:
            return target
        height, width = size
        corners = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        return TF.perspective(target, corners, params["endpoints"])


class ElasticTransform(BatchTransform):
    """Displace each image's pixels by its own smooth random field.

    The field is uniform noise blurred with a Gaussian of ``sigma``, scaled by ``alpha``
    (torchvision v2's draw; numbers or (x, y) pairs).

    Args:
        alpha: The displacement's magnitude in pixels: one for both axes, or (x, y).
        sigma: The smoothing Gaussian's standard deviation: one, or (x, y).
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``).
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel.
        same_on_batch: One field for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: An ``alpha`` or ``sigma`` that is negative, not finite or not one
            number or two, an ``interpolation`` other than nearest or bilinear, or a
            ``fill`` that is not finite.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.rand(2, 3, 8, 8)
        >>> ElasticTransform(alpha=0.0)(images).allclose(images)  # no displacement
        True
        >>> ElasticTransform(alpha=50.0, sigma=5.0)(images).equal(images)
        False
    """

    targets = "transform"
    device_params = ("displacement",)  # a whole field per sample: stays on the device

    def __init__(
        self,
        alpha: float | Sequence[float] = 50.0,
        sigma: float | Sequence[float] = 5.0,
        interpolation: InterpolationMode | str = InterpolationMode.BILINEAR,
        fill: Fill = 0,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.interpolation, self.fill = resampling(interpolation, fill)
        self.alpha, self.sigma = xy(alpha, "alpha"), xy(sigma, "sigma")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
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

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return elastic(images, params["displacement"], self.interpolation, self.fill)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        return elastic(masks, params["displacement"], "nearest", 0)  # background 0

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        displacement = params["displacement"].unsqueeze(0)
        if isinstance(target, getattr(tv_tensors, "KeyPoints", ())):  # torchvision >= 0.23
            return TF.elastic(_inside(target), displacement)
        if isinstance(target, tv_tensors.BoundingBoxes) and not target.format.name.endswith("R"):
            corners = TF.convert_bounding_box_format(target, new_format="XYXY")
            moved = TF.elastic(_inside(corners), displacement)
            return TF.convert_bounding_box_format(moved, new_format=target.format)
        return TF.elastic(target, displacement)


def _inside(points: Any) -> Any:
    """``points`` (x, y pairs in the last dimension) clamped to the canvas's pixels.

    torchvision's elastic reads box corners and keypoints only to look its field up, at
    their pixel; versions before its fix (pytorch/vision#9394) look a corner on the far edge
    (x = width) up past the field: an IndexError on the CPU, a device-side assert on CUDA
    that breaks every later CUDA call of the process. Clamped first, every version gives
    the fixed versions' result.
    """
    height, width = points.canvas_size
    limits = torch.tensor([width - 1, height - 1], dtype=points.dtype, device=points.device)
    pairs = points.unflatten(-1, (-1, 2))
    inside = pairs.clamp(min=0).minimum(limits).flatten(-2)
    return tv_tensors.wrap(inside, like=points)
