"""timm's augmentation splits (train.py's ``--aug-splits``, for AugMix and the JSD loss):
a batch of N crops becomes ``num_splits`` x N images, the first N clean (crop and
flips), each further N the same crops through the augmentation again, and the targets
repeated: the order of timm's ``AugMixDataset`` and ``fast_collate``.

The split runs on the uint8 batch (on the device, or in the worker on a CPU), so the
workers crop each image once and only N images cross to the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fastload.gpu.geometric import RandomHorizontalFlip, RandomVerticalFlip

__all__ = ["SplitAugment", "SplitTargets", "split_batches", "split_source"]

#: What timm's ``AugMixDataset`` holds (read by name: importing this does not import timm).
_AUGMIX_ATTRIBUTES = ("dataset", "num_splits", "augmentation", "normalize")


def split_source(dataset: Any, num_aug_splits: int) -> tuple[Any, int]:
    """The dataset to read and the number of splits: timm's ``AugMixDataset`` (which
    train.py wraps around the data with ``--aug-splits``) is read through, its split
    made on the batch.

    Raises:
        ValueError: ``num_aug_splits`` of 1 or below 0, or one that differs from the
            ``AugMixDataset``'s ``num_splits``.
    """
    splits = num_aug_splits
    if all(hasattr(dataset, name) for name in _AUGMIX_ATTRIBUTES):
        if splits and splits != dataset.num_splits:
            raise ValueError(
                f"create_loader: num_aug_splits={num_aug_splits} but the AugMixDataset "
                f"has num_splits={dataset.num_splits}"
            )
        splits, dataset = dataset.num_splits, dataset.dataset
    if splits == 1 or splits < 0:  # timm's train.py: "A split of 1 makes no sense"
        raise ValueError(f"create_loader: num_aug_splits must be 0 or >= 2, got {splits}")
    return dataset, splits


class SplitAugment(nn.Module):
    """``shared`` on the batch (the clean split), then ``augment`` on it again for each
    further split; the splits concatenated along the batch.

    Example:
        >>> split = SplitAugment(None, nn.Identity(), num_splits=3)
        >>> split(torch.zeros(2, 3, 4, 4, dtype=torch.uint8)).shape
        torch.Size([6, 3, 4, 4])
    """

    def __init__(self, shared: nn.Module | None, augment: nn.Module | None, num_splits: int):
        super().__init__()
        self.shared, self.augment, self.num_splits = shared, augment, num_splits

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        clean = images if self.shared is None else self.shared(images)
        augment = self.augment
        augmented = [clean if augment is None else augment(clean)
                     for _ in range(self.num_splits - 1)]  # fmt: skip
        return torch.cat([clean, *augmented])


class SplitTargets:
    """``collate``, with the targets repeated once per split (timm's ``fast_collate``
    on the tuples of ``AugMixDataset``)."""

    def __init__(self, collate: Callable[[list[Any]], Any], num_splits: int) -> None:
        self.collate, self.num_splits = collate, num_splits

    def __call__(self, samples: list[Any]) -> tuple[Any, torch.Tensor]:
        images, target = self.collate(samples)
        target = torch.as_tensor(target)
        return images, target.repeat(self.num_splits, *([1] * (target.dim() - 1)))


def split_batches(
    transform: nn.Sequential | None,
    collate: Callable[[list[Any]], Any],
    num_splits: int,
) -> tuple[nn.Sequential, SplitTargets]:
    """The batch transform and collate of ``num_splits`` splits: timm's primary
    transforms after the crop (the flips) are shared by every split, the rest (policy,
    jitter, grayscale, blur) is the augmentation each further split draws anew."""
    modules = list(transform or [])
    flips = [m for m in modules if isinstance(m, (RandomHorizontalFlip, RandomVerticalFlip))]
    rest = [m for m in modules if m not in flips]
    shared = nn.Sequential(*flips) if flips else None
    split = SplitAugment(shared, nn.Sequential(*rest) if rest else None, num_splits)
    return nn.Sequential(split), SplitTargets(collate, num_splits)
