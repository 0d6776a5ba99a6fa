"""CPU-side sample transforms: the albumentations adapter.

Pixels stay uint8 on the CPU; conversion to float and normalisation happen on the
GPU (``DataPrefetcher(mean=..., std=...)``), so 4x fewer bytes cross shared memory,
pinned memory and PCIe.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from fastload.collate import chw

__all__ = ["Albumentations"]


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
        return chw(out)

    def __repr__(self) -> str:
        return f"Albumentations({self.transform!r})"
