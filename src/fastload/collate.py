"""Collate functions that keep pixels uint8: one NCHW stack, or encoded images as a list.

Pixels stay uint8 on the CPU; conversion to float and normalisation happen on the
device (``DataPrefetcher(mean=..., std=...)``), so 4x fewer bytes cross shared memory,
pinned memory and PCIe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

__all__ = ["chw", "encoded_collate", "uint8_collate"]


def chw(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A CHW tensor view of an HWC array (no copy), or the CHW tensor itself."""
    if isinstance(image, torch.Tensor):
        return image
    tensor = torch.from_numpy(np.ascontiguousarray(image))  # flips leave negative strides
    return tensor.permute(2, 0, 1) if tensor.dim() == 3 else tensor.unsqueeze(0)


def uint8_collate(batch: Sequence[Any]) -> Any:
    """Stack a batch of images into one NCHW tensor with a single copy.

    Samples are images, or tuples/lists whose first element is the image (HWC ndarrays,
    as albumentations returns them, or CHW tensors); the other elements are collated by
    ``default_collate``. Returns ``[images, labels, ...]`` like ``default_collate``.

    Example:
        >>> batch = [(np.zeros((4, 5, 3), np.uint8), 0), (np.ones((4, 5, 3), np.uint8), 1)]
        >>> images, labels = uint8_collate(batch)
        >>> images.shape, images.dtype, labels.tolist()
        (torch.Size([2, 3, 4, 5]), torch.uint8, [0, 1])
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    if isinstance(batch[0], (tuple, list)):
        images = _stack([sample[0] for sample in batch])
        return [images, *default_collate([tuple(sample[1:]) for sample in batch])]
    return _stack(batch)


def _stack(images: Sequence[np.ndarray | torch.Tensor]) -> torch.Tensor:
    views = [chw(image) for image in images]
    shapes = {tuple(view.shape) for view in views}
    if len(shapes) > 1:
        raise ValueError(
            f"images in a batch differ in shape {sorted(shapes)}: resize or crop them to one "
            "size first (or decode on the GPU, where a batch may mix sizes)"
        )
    return torch.stack(views)


def encoded_collate(batch: Sequence[Any]) -> Any:
    """Keep a batch of encoded images (1-D uint8 tensors of different lengths) as a list.

    For datasets with ``decode=None``: samples are ``(bytes, label, ...)``; returns
    ``[list_of_bytes, labels, ...]``, the rest collated by ``default_collate``, ready for
    ``DataPrefetcher(decode=GPUDecoder(...))``.
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    if isinstance(batch[0], (tuple, list)):
        encoded = [sample[0] for sample in batch]
        return [encoded, *default_collate([tuple(sample[1:]) for sample in batch])]
    return list(batch)
