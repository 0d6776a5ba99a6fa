"""CPU-side sample transforms: an albumentations adapter and a uint8 collate.

Pixels stay uint8 on the CPU; conversion to float and normalisation happen on the
GPU (``DataPrefetcher(mean=..., std=...)``), so 4x fewer bytes cross shared memory,
pinned memory and PCIe.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

__all__ = ["Albumentations", "encoded_collate", "uint8_collate"]


def _chw(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A CHW tensor view of an HWC array (no copy), or the CHW tensor itself."""
    if isinstance(image, torch.Tensor):
        return image
    tensor = torch.from_numpy(np.ascontiguousarray(image))  # flips leave negative strides
    return tensor.permute(2, 0, 1) if tensor.dim() == 3 else tensor.unsqueeze(0)


class Albumentations:
    """Run an albumentations transform on an HWC uint8 image; return a CHW tensor.

    The tensor is a view of the transform's output (no copy): the collate that stacks
    the batch makes the one copy. In each DataLoader worker the transform is reseeded
    from torch's per-worker seed: albumentations 2 draws from a generator made when the
    ``Compose`` was built, which forked workers would otherwise all share, giving every
    worker the same sequence of crops and flips.

    Args:
        transform: An ``albumentations.Compose`` (or any callable taking ``image=``).

    Example:
        >>> import albumentations as A
        >>> augment = Albumentations(A.Compose([A.RandomCrop(32, 32), A.HorizontalFlip()]))
        >>> augment(np.zeros((48, 64, 3), np.uint8)).shape
        torch.Size([3, 32, 32])
    """

    def __init__(self, transform: Callable[..., dict[str, Any]]) -> None:
        if not callable(transform):
            raise TypeError(
                f"transform must be an albumentations transform, got {type(transform).__name__}"
            )
        self.transform = transform
        self._seeded_pid: int | None = None
        self._warned = False

    def _reseed_in_worker(self) -> None:
        self._seeded_pid = os.getpid()
        info = get_worker_info()
        reseed = getattr(self.transform, "set_random_seed", None)  # albumentations >= 2
        if info is not None and reseed is not None:
            reseed(info.seed % 2**32)

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        if not isinstance(image, np.ndarray):
            raise TypeError(
                f"Albumentations takes an HWC uint8 ndarray, got {type(image).__name__}; "
                "give the dataset decode='numpy'"
            )
        if self._seeded_pid != os.getpid():
            self._reseed_in_worker()
        out = self.transform(image=image)["image"]
        if out.dtype not in (np.uint8, torch.uint8) and not self._warned:
            self._warned = True
            warnings.warn(
                f"the albumentations transform returns {out.dtype}: normalising on the CPU "
                "moves 4x the bytes of uint8; normalise on the GPU with "
                "DataPrefetcher(mean=..., std=...) instead",
                stacklevel=2,
            )
        return _chw(out)

    def __repr__(self) -> str:
        return f"Albumentations({self.transform!r})"


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
    views = [_chw(image) for image in images]
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
