"""Crops, pads and resizes of the batch: per-sample windows gathered exactly, crop boxes
resampled together by ``roi_align``, masks resampled nearest, box masks."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from fastload.gpu.functional.dtype import restore, to_float

__all__ = [
    "PADDING_MODES",
    "box_mask",
    "center_crop",
    "crop_windows",
    "gather_masks",
    "nearest_indices",
    "pad",
    "resize",
    "resized_crops",
]

#: torchvision's padding modes and torch's names for them.
PADDING_MODES = {"constant": "constant", "edge": "replicate", "reflect": "reflect"}


def crop_windows(images: Tensor, top: Tensor, left: Tensor, height: int, width: int) -> Tensor:
    """Per-sample integer crops of one size, by gathering rows and columns: exact, any dtype."""
    n = images.shape[0]
    rows = top.view(n, 1) + torch.arange(height, device=images.device)
    cols = left.view(n, 1) + torch.arange(width, device=images.device)
    batch = torch.arange(n, device=images.device).view(n, 1, 1)
    # Index the NHWC view so that each gathered element is a whole pixel (C values).
    windows = images.permute(0, 2, 3, 1)[batch, rows.view(n, height, 1), cols.view(n, 1, width)]
    return windows.permute(0, 3, 1, 2).contiguous()


def pad(
    images: Tensor, padding: tuple[int, int, int, int], mode: str = "constant", fill: float = 0
) -> Tensor:
    """Pad by ``(left, right, top, bottom)`` with a ``mode`` of :data:`PADDING_MODES`
    (``fill`` for 'constant'); reflect and edge padding are computed on floats."""
    torch_mode = PADDING_MODES[mode]
    if torch_mode == "constant":
        return F.pad(images, padding, value=float(fill))
    return restore(F.pad(to_float(images), padding, mode=torch_mode), images.dtype)


def center_crop(images: Tensor, size: tuple[int, int]) -> Tensor:
    """The central ``size`` window, zero-padded first where the image is smaller (as
    torchvision's ``center_crop``)."""
    crop_h, crop_w = size
    height, width = images.shape[-2:]
    if crop_h > height or crop_w > width:
        pad_h, pad_w = max(0, crop_h - height), max(0, crop_w - width)
        images = F.pad(images, (pad_w // 2, (pad_w + 1) // 2, pad_h // 2, (pad_h + 1) // 2))
        height, width = images.shape[-2:]
    top = round((height - crop_h) / 2.0)
    left = round((width - crop_w) / 2.0)
    return images[..., top : top + crop_h, left : left + crop_w]


def resize(images: Tensor, size: tuple[int, int], *, antialias: bool = True) -> Tensor:
    """Bilinear resize of the batch to ``size``, antialiased where it shrinks."""
    if size == tuple(images.shape[-2:]):
        return images
    resized = F.interpolate(
        to_float(images), size=size, mode="bilinear", align_corners=False, antialias=antialias
    )
    return restore(resized, images.dtype)


def resized_crops(images: Tensor, boxes: dict[str, Tensor], size: tuple[int, int]) -> Tensor:
    """Crop boxes ``top, left, height, width`` (per sample) resampled to ``size`` at once,
    by ``torchvision.ops.roi_align``: several bilinear samples are averaged per output
    pixel where a crop shrinks (the antialiasing a plain ``grid_sample`` lacks)."""
    from torchvision.ops import roi_align

    n = images.shape[0]
    top, left = boxes["top"].float(), boxes["left"].float()
    rois = torch.stack(
        [
            torch.arange(n, device=images.device, dtype=torch.float32),
            left,
            top,
            left + boxes["width"].float(),
            top + boxes["height"].float(),
        ],
        dim=1,
    )
    pixels = to_float(images)
    # aligned=True: pixel k covers [k, k+1), as in torchvision's resize (half-pixel centres).
    crops = roi_align(pixels, rois.to(pixels.dtype), size, 1.0, -1, True)
    return restore(crops, images.dtype)


def nearest_indices(start: Tensor, length: Tensor, size: int) -> Tensor:
    """(N, size) source indices of each sample's span ``start .. start + length`` resized
    to ``size`` as torch's (legacy) nearest does: ``floor(i * length / size)``, in float32."""
    scale = length.to(torch.float32) / size
    steps = torch.arange(size, device=start.device, dtype=torch.float32)
    index = (steps * scale.view(-1, 1)).floor().long()
    return start.long().view(-1, 1) + torch.minimum(index, (length.long() - 1).view(-1, 1))


def gather_masks(masks: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """Each sample's (N, H, W) or (N, K, H, W) masks at its own ``rows`` (N, h) and
    ``cols`` (N, w): exact, any dtype."""
    grid = masks.unsqueeze(1) if masks.dim() == 3 else masks
    batch = torch.arange(len(grid), device=grid.device).view(-1, 1, 1)
    picked = grid[batch, :, rows.unsqueeze(2), cols.unsqueeze(1)]  # (N, h, w, K)
    out = picked.permute(0, 3, 1, 2).contiguous()
    return out.squeeze(1) if masks.dim() == 3 else out


def box_mask(
    top: Tensor, left: Tensor, height: Tensor, width: Tensor, size: tuple[int, int]
) -> Tensor:
    """(N, 1, H, W) bool: inside each sample's box."""
    rows = torch.arange(size[0], device=top.device).view(1, -1, 1)
    cols = torch.arange(size[1], device=top.device).view(1, 1, -1)
    inside_rows = (rows >= top.view(-1, 1, 1)) & (rows < (top + height).view(-1, 1, 1))
    inside_cols = (cols >= left.view(-1, 1, 1)) & (cols < (left + width).view(-1, 1, 1))
    return (inside_rows & inside_cols).unsqueeze(1)
