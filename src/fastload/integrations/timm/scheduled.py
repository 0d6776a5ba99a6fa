"""timm's scheduled resolutions (train.py's ``--train-img-sizes``): each batch has one
of several sizes, and its own batch size, drawn by timm's ``ScheduledBatchSampler``
(so the schedule is timm's, seed for seed); the workers crop each sample to its
batch's size, and the batch modules for that size run on the batch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import RandomSampler

__all__ = ["BySize", "scheduled_batches", "scheduled_sizes"]


def scheduled_sizes(
    choices: Sequence[Any],
    input_size: int | Sequence[int],
    mean: Sequence[float],
    *,
    is_training: bool,
    iterable: bool,
    num_aug_splits: int,
    use_multi_epochs_loader: bool,
) -> list[tuple[int, int]]:
    """The (height, width) of each of timm's ``input_size_choices`` (ints, (H, W) or
    (C, H, W) with the channels of ``input_size``, else of ``mean``), with timm's checks.

    Raises:
        ValueError: Not training, a multi-epochs loader, augmentation splits, no
            choices, a choice of another channel count or a size not above 0.
        TypeError: An iterable dataset (the sampler picks the samples of a batch).
    """
    if not is_training:
        raise ValueError("create_loader: input_size_choices is only for training loaders")
    if use_multi_epochs_loader:
        raise ValueError("create_loader: use_multi_epochs_loader with input_size_choices")
    if iterable:
        raise TypeError("create_loader: input_size_choices needs a map-style dataset")
    if num_aug_splits > 0:
        raise ValueError("create_loader: num_aug_splits with input_size_choices")
    if not choices:
        raise ValueError("create_loader: input_size_choices must hold at least one size")
    whole = isinstance(input_size, Sequence) and len(input_size) == 3
    channels = input_size[0] if whole else len(mean)  # type: ignore[index]
    sizes = []
    for choice in choices:
        shape = (channels, choice, choice) if isinstance(choice, int) else tuple(choice)
        shape = (channels, *shape) if len(shape) == 2 else shape
        if (
            len(shape) != 3
            or shape[0] != channels
            or not all(isinstance(side, int) and side > 0 for side in shape)
        ):
            raise ValueError(
                f"create_loader: input_size_choices: {choice!r} is not an int, (H, W) or "
                f"(C, H, W) of positive sides with {channels} channels"
            )
        sizes.append((shape[1], shape[2]))
    return sizes


class BySize(nn.Module):
    """The module for the batch's (height, width): timm's transforms for a size
    (a translation is relative to it) picked per batch.

    Example:
        >>> by_size = BySize({(2, 2): nn.Identity(), (4, 4): None})
        >>> by_size(torch.zeros(1, 3, 4, 4)).shape
        torch.Size([1, 3, 4, 4])
    """

    def __init__(self, modules: dict[tuple[int, int], nn.Module | None]) -> None:
        super().__init__()
        self.sizes = nn.ModuleDict(
            {f"{h}x{w}": module for (h, w), module in modules.items() if module is not None}
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        height, width = images.shape[-2:]
        key = f"{height}x{width}"
        return images if key not in self.sizes else self.sizes[key](images)


def scheduled_batches(
    dataset: Any,
    sampler: Any,
    sizes: Sequence[tuple[int, int]],
    crop: Callable[[tuple[int, int]], Any],
    augment: Callable[[tuple[int, int]], nn.Module | None],
    *,
    batch_size: int,
    batch_size_choices: Sequence[int] | None,
    **schedule: Any,
) -> tuple[Any, nn.Sequential, dict[str, Any]]:
    """timm's ``ScheduledTransformDataset`` over ``dataset`` (one ``crop`` per size),
    the batch modules by size, and the ``batch_sampler`` argument of the loader.

    ``schedule`` holds timm's ``ScheduledBatchSampler`` arguments (``choice_weights``,
    ``seed``, ``num_batches``, ``choice_schedule``, ``schedule_epochs``,
    ``schedule_spread``, ``schedule_random_mix``).
    """
    if batch_size_choices is None:
        batch_size_choices = [batch_size] * len(sizes)
    if len(batch_size_choices) != len(sizes):
        raise ValueError(
            "create_loader: batch_size_choices and input_size_choices differ in length"
        )
    weights = schedule.get("choice_weights")
    if weights is not None and len(weights) != len(sizes):
        raise ValueError(
            "create_loader: batch_choice_weights and input_size_choices differ in length"
        )
    try:  # timm's own sampler: the schedule is timm's, seed for seed
        timm = importlib.import_module("timm.data.scheduled_sampler")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "input_size_choices uses timm's own ScheduledBatchSampler, which the installed "
            "timm lacks (or timm is missing): pip install -U timm"
        ) from None
    dataset.transform = None
    scheduled = timm.ScheduledTransformDataset(dataset, [crop(size) for size in sizes])
    batches = timm.ScheduledBatchSampler(
        sampler if sampler is not None else RandomSampler(scheduled),
        batch_sizes=batch_size_choices,
        drop_last=True,
        **schedule,
    )
    modules = {size: augment(size) for size in sizes}
    return scheduled, nn.Sequential(BySize(modules)), {"batch_sampler": batches}
