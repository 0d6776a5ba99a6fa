"""Geometric batch transforms: flips, crops, resizes, each with per-sample parameters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor

from fastload._checks import check_int, finite, positive_pair
from fastload.boxes import TRIES, sample_boxes
from fastload.gpu.arguments import output_size
from fastload.gpu.base import BatchTransform, Params, blend_where
from fastload.gpu.functional import (
    PADDING_MODES,
    center_crop,
    crop_windows,
    gather_masks,
    nearest_indices,
    pad,
    resize,
    resized_crops,
)

__all__ = [
    "BatchRandomResizedCrop",
    "CenterCrop",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
]


class _RandomFlip(BatchTransform):
    default_p = 0.5
    dim = -1
    targets = "transform"

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return blend_where(params["apply"], images.flip(self.dim), images)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        return self.apply_transform(masks, params)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        if not params["apply"]:
            return target
        return TF.horizontal_flip(target) if self.dim == -1 else TF.vertical_flip(target)


class RandomHorizontalFlip(_RandomFlip):
    """Flip each image left-right with probability ``p`` (its own coin per sample).

    Args:
        p: Probability of flipping each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1].

    Example:
        >>> images = torch.arange(3, dtype=torch.uint8).view(1, 1, 1, 3)
        >>> RandomHorizontalFlip(p=1.0)(images).flatten().tolist()
        [2, 1, 0]
    """

    dim = -1


class RandomVerticalFlip(_RandomFlip):
    """Flip each image upside down with probability ``p`` (its own coin per sample).

    Args:
        p: Probability of flipping each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1].

    Example:
        >>> images = torch.arange(3, dtype=torch.uint8).view(1, 1, 3, 1)
        >>> RandomVerticalFlip(p=1.0)(images).flatten().tolist()
        [2, 1, 0]
    """

    dim = -2


class RandomCrop(BatchTransform):
    """A random ``size`` window of each image, optionally after padding.

    torchvision's ``RandomCrop``: ``padding``, ``pad_if_needed``, ``fill``,
    ``padding_mode`` of 'constant', 'edge' or 'reflect'. Pixels are copied, not
    interpolated.

    Args:
        size: The window ``(h, w)`` (an int for a square).
        padding: Pixels added first: one number for every side, ``(left/right,
            top/bottom)`` or ``(left, top, right, bottom)``.
        pad_if_needed: Pad an image smaller than ``size`` to fit it.
        fill: The value of constant padding, on the image's own scale.
        padding_mode: 'constant', 'edge' or 'reflect'.
        same_on_batch: One window position for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: An unknown ``padding_mode``, a ``size`` that is not a positive int or
            ``(h, w)``, a ``fill`` that is not finite; on a call, a ``padding`` of another
            form, or a window larger than the (padded) image.

    Example:
        >>> RandomCrop(2)(torch.zeros(8, 3, 4, 4)).shape
        torch.Size([8, 3, 2, 2])
        >>> crop = RandomCrop(6, padding=1, fill=9)  # 4x4 padded to 6x6: one window
        >>> crop(torch.zeros(1, 1, 4, 4))[0, 0, :2].tolist()
        [[9.0, 9.0, 9.0, 9.0, 9.0, 9.0], [9.0, 0.0, 0.0, 0.0, 0.0, 9.0]]
    """

    targets = "transform"

    def __init__(
        self,
        size: int | Sequence[int],
        padding: int | Sequence[int] | None = None,
        pad_if_needed: bool = False,
        fill: float = 0,
        padding_mode: str = "constant",
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        if padding_mode not in PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {sorted(PADDING_MODES)}, got {padding_mode!r}"
            )
        self.size = output_size(size)
        self.padding = padding
        self.pad_if_needed = pad_if_needed
        self.fill = finite(fill, "fill")
        self.padding_mode = padding_mode

    def _padding(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(left, right, top, bottom), torchvision's order of the argument resolved."""
        pad = self.padding
        if pad is None:
            left = right = top = bottom = 0
        elif isinstance(pad, int):
            left = right = top = bottom = pad
        elif len(pad) == 2:
            left = right = pad[0]
            top = bottom = pad[1]
        elif len(pad) == 4:
            left, top, right, bottom = pad
        else:
            raise ValueError(f"padding must be an int or a sequence of 2 or 4, got {pad!r}")
        if self.pad_if_needed:
            height, width = height + top + bottom, width + left + right
            extra_h, extra_w = max(0, self.size[0] - height), max(0, self.size[1] - width)
            left, right, top, bottom = (
                left + extra_w,
                right + extra_w,
                top + extra_h,
                bottom + extra_h,
            )
        return left, right, top, bottom

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, _, height, width = shape
        left, right, top, bottom = self._padding(height, width)
        padded_h, padded_w = height + top + bottom, width + left + right
        crop_h, crop_w = self.size
        if crop_h > padded_h or crop_w > padded_w:
            raise ValueError(
                f"crop size {self.size} is larger than the (padded) image {(padded_h, padded_w)}"
            )
        offsets = self._rand(n, 2, device=device, generator=generator)
        # Python scalars, not a tensor built from a list: that would be a blocking copy.
        return {
            "top": (offsets[:, 0] * (padded_h - crop_h + 1)).long(),
            "left": (offsets[:, 1] * (padded_w - crop_w + 1)).long(),
        }

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        left, right, top, bottom = self._padding(images.shape[-2], images.shape[-1])
        if left or right or top or bottom:
            images = pad(images, (left, right, top, bottom), self.padding_mode, self.fill)
        return crop_windows(images, params["top"], params["left"], *self.size)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        return self.apply_transform(masks, params)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        left, right, top, bottom = self._padding(*size)
        if left or right or top or bottom:
            target = TF.pad(target, [left, top, right, bottom], padding_mode=self.padding_mode)
        return TF.crop(target, params["top"], params["left"], *self.size)


class CenterCrop(BatchTransform):
    """The central ``size`` window (zero-padded first where the image is smaller).

    Args:
        size: The window ``(h, w)`` (an int for a square).

    Raises:
        ValueError: A ``size`` that is not a positive int or ``(h, w)``.

    Example:
        >>> images = torch.arange(16, dtype=torch.uint8).view(1, 1, 4, 4)
        >>> CenterCrop(2)(images)[0, 0].tolist()
        [[5, 6], [9, 10]]
    """

    targets = "transform"

    def __init__(self, size: int | Sequence[int]) -> None:
        super().__init__()
        self.size = output_size(size)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return center_crop(images, self.size)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        return self.apply_transform(masks, params)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        return TF.center_crop(target, list(self.size))


class Resize(BatchTransform):
    """Resize the batch, bilinear with antialiasing (torchvision's defaults).

    ``size``: an int resizes the shorter side to it, keeping the aspect ratio (as in
    torchvision; ``max_size`` caps the longer side); ``(h, w)`` resizes to exactly that.

    Args:
        size: The shorter side's length, or the output ``(h, w)``.
        max_size: The longest the longer side may be, with an int ``size``.
        antialias: Low-pass filter when shrinking, as torchvision does.

    Raises:
        ValueError: A ``size`` or ``max_size`` that is not a positive int (``size``: or
            ``(h, w)``).

    Example:
        >>> Resize(16)(torch.zeros(2, 3, 32, 48)).shape
        torch.Size([2, 3, 16, 24])
        >>> Resize(16, max_size=20)(torch.zeros(2, 3, 32, 48)).shape
        torch.Size([2, 3, 13, 20])
    """

    targets = "transform"

    def __init__(
        self, size: int | Sequence[int], *, max_size: int | None = None, antialias: bool = True
    ) -> None:
        super().__init__()
        self.size = check_int(size, "size", low=1) if isinstance(size, int) else output_size(size)
        self.max_size = None if max_size is None else check_int(max_size, "max_size", low=1)
        self.antialias = antialias

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        if not isinstance(self.size, int):
            return self.size
        short, long = sorted((height, width))
        new_short, new_long = self.size, int(self.size * long / short)
        if self.max_size is not None and new_long > self.max_size:
            new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return resize(images, self._output_size(*images.shape[-2:]), antialias=self.antialias)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        height, width = masks.shape[-2:]
        out_h, out_w = self._output_size(height, width)
        n, device = masks.shape[0], masks.device
        zeros = torch.zeros(n, device=device)
        rows = nearest_indices(zeros, torch.full((n,), height, device=device), out_h)
        cols = nearest_indices(zeros, torch.full((n,), width, device=device), out_w)
        return gather_masks(masks, rows, cols)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        return TF.resize(target, list(self._output_size(*size)))


class BatchRandomResizedCrop(BatchTransform):
    """A random crop of each image (its own area and aspect ratio), resized to ``size``.

    torchvision's ``RandomResizedCrop`` (also ``fastload.gpu.RandomResizedCrop``) on a
    batch.

    ``size``, ``scale`` and ``ratio`` mean what they mean in torchvision, and the crop
    boxes are drawn by torchvision's algorithm (10 tries, then a central fallback; see
    :mod:`fastload.boxes`), for every sample at once. All crops are resampled in one
    ``torchvision.ops.roi_align`` call, which averages several bilinear samples per
    output pixel when a crop shrinks: the antialiasing that a plain ``grid_sample`` lacks.

    Args:
        size: The output ``(h, w)`` (an int for a square).
        scale: The range of the crop's area, as a fraction of the image's.
        ratio: The range of the crop's aspect ratio (width over height).
        same_on_batch: One crop box for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``size`` that is not a positive int or ``(h, w)``; a ``scale`` or
            ``ratio`` that is not ``(low, high)`` with ``0 < low <= high``.

    Example:
        >>> images = torch.rand(4, 3, 32, 48)
        >>> crop = BatchRandomResizedCrop(16)
        >>> params = crop.sample_params(images.shape, images.device)  # a box per sample
        >>> params["height"].shape, crop(images, params=params).shape
        (torch.Size([4]), torch.Size([4, 3, 16, 16]))
    """

    targets = "transform"

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.size = output_size(size)
        self.scale = positive_pair(scale, "scale")
        self.ratio = positive_pair(ratio, "ratio")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, _, height, width = shape
        uniforms = self._rand(n, TRIES, 4, device=device, generator=generator)
        heights = torch.full((n,), height, device=device)  # filled there: no host copy
        widths = torch.full((n,), width, device=device)
        boxes = sample_boxes(heights, widths, uniforms, self.scale, self.ratio)
        return {"top": boxes.top, "left": boxes.left, "height": boxes.height, "width": boxes.width}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return resized_crops(images, params, self.size)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        rows = nearest_indices(params["top"], params["height"], self.size[0])
        cols = nearest_indices(params["left"], params["width"], self.size[1])
        return gather_masks(masks, rows, cols)

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        box = (int(params[key]) for key in ("top", "left", "height", "width"))
        return TF.resized_crop(target, *box, list(self.size))


#: The name torchvision users know; the same class.
RandomResizedCrop = BatchRandomResizedCrop
