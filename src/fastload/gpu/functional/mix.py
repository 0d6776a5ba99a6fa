"""Mixing each image with its neighbour in the batch (torchvision's pairing: each sample
with the one before it), by a weight or by a pasted box."""

from __future__ import annotations

import torch
from torch import Tensor

from fastload.gpu.functional.crop import box_mask
from fastload.gpu.functional.dtype import restore, to_float

__all__ = ["cutmix", "mixup"]


def mixup(images: Tensor, lam: Tensor) -> Tensor:
    """``lam * image + (1 - lam) * previous image``, ``lam`` (N,) per sample."""
    pixels = to_float(images)
    weight = lam.to(pixels.dtype).view(-1, 1, 1, 1)
    return restore(weight * pixels + (1 - weight) * pixels.roll(1, dims=0), images.dtype)


def cutmix(images: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor) -> Tensor:
    """The previous image's pixels pasted into each image's box."""
    mask = box_mask(top, left, height, width, (images.shape[-2], images.shape[-1]))
    return torch.where(mask, images.roll(1, dims=0), images)
