"""``create_loader``: timm's factory with its signature, built from FastLoader,
DataPrefetcher and ``fastload.gpu``; what it returns keeps the contract of timm's
``PrefetchLoader`` (``len``, ``sampler``, ``dataset``, a settable ``mixup_enabled``)."""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import (
    DistributedSampler,
    IterableDataset,
    default_collate,
    get_worker_info,
)

from fastload._checks import check_int
from fastload.integrations.timm.mixup import TIMM_ATTRIBUTES, Mixup
from fastload.integrations.timm.pipeline import device_augment, erasing, sample_transform
from fastload.integrations.timm.samplers import OrderedDistributedSampler, RepeatAugSampler
from fastload.integrations.timm.scheduled import scheduled_batches, scheduled_sizes
from fastload.integrations.timm.splits import split_batches, split_source
from fastload.loader.core import FastLoader
from fastload.loader.proxy import LoaderProxy
from fastload.prefetch import DataPrefetcher
from fastload.system import default_device, one_thread

__all__ = ["AugmentedCollate", "PrefetchLoader", "create_loader"]

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)


class PrefetchLoader(LoaderProxy):
    """Batches ``(input, target)`` on the device, normalised, then mixed and erased as
    timm's ``PrefetchLoader`` (with ``FastCollateMixup``) hands them out.

    ``len()``, ``sampler``, ``batch_sampler`` and the rest come from the FastLoader;
    ``dataset`` is the dataset given to ``create_loader``. Setting ``mixup_enabled``
    turns the mixing off (or on) here and on the ``FastCollateMixup`` given, as
    train.py does for its last epochs.
    """

    def __init__(
        self,
        loader: FastLoader[Any],
        prefetcher: DataPrefetcher,
        *,
        dataset: Any,
        mixup: Mixup | None = None,
        mixup_source: Any = None,
        random_erasing: nn.Module | None = None,
        channels_last: bool = False,
        mixup_in_workers: bool = False,
    ) -> None:
        self.loader = loader
        self.prefetcher = prefetcher
        self._dataset = dataset
        self.mixup = mixup
        self.mixup_in_workers = mixup_in_workers  # mixup is the workers' (in the collate)
        self.mixup_source = mixup_source
        self.random_erasing = random_erasing
        self.channels_last = channels_last

    @property
    def dataset(self) -> Any:
        return self._dataset

    @property
    def device(self) -> torch.device:
        return self.prefetcher.device

    @property
    def mixup_enabled(self) -> bool:
        return self.mixup is not None and self.mixup.mixup_enabled

    @mixup_enabled.setter
    def mixup_enabled(self, enabled: bool) -> None:
        if self.mixup is not None:  # timm: a no-op without FastCollateMixup
            self.mixup.mixup_enabled = bool(enabled)
            if self.mixup_source is not None:
                self.mixup_source.mixup_enabled = bool(enabled)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # On the CPU with workers, the workers have the cores: torch's intra-op threads
        # here would spin against them, so this batch work runs on one thread (as the
        # prefetcher's normalisation does), the training step on all of them.
        workers = getattr(self.loader, "num_workers", 0) > 0 and self.device.type == "cpu"
        for images, target in self.prefetcher:
            with one_thread() if workers else contextlib.nullcontext():
                images, target = self._finish(images, target)
            yield images, target

    def _finish(
        self, images: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # mixing commutes with the per-channel normalisation, so mixing the
        # normalised batch gives what timm's collate-then-normalise gives
        if self.mixup is not None and not self.mixup_in_workers:
            images, target = self.mixup(images, target)
        if self.random_erasing is not None:
            images = self.random_erasing(images)
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, target


class AugmentedCollate:
    """``collate``, then ``transform`` on the collated images and ``mixup`` on the batch,
    in the worker that made it: the batch modules of a loader on the CPU (mixing on
    uint8, where timm's ``FastCollateMixup`` mixes).

    Example:
        >>> from torch.utils.data import default_collate
        >>> flip = AugmentedCollate(default_collate, lambda images: images.flip(-1))
        >>> images, labels = flip([(torch.tensor([[[1, 2]]]), 0)])
        >>> images.tolist(), labels.tolist()
        ([[[[2, 1]]]], [0])
    """

    def __init__(
        self,
        collate: Callable[[list[Any]], Any],
        transform: Callable[[torch.Tensor], Any] | None,
        mixup: Mixup | None = None,
    ) -> None:
        self.collate, self.transform, self.mixup = collate, transform, mixup

    def __call__(self, samples: list[Any]) -> tuple[Any, Any]:
        images, target = self.collate(samples)
        if self.transform is not None:
            images = self.transform(images)
        if self.mixup is not None:
            images, target = self.mixup(images, target)
        return images, target


def _seed_worker(worker_id: int, worker_seeding: str | Callable[[Any], int] = "all") -> None:
    """timm's worker seeding: ``"all"`` also seeds NumPy from the worker's seed,
    ``"part"`` leaves NumPy alone, a callable gives the seed of every generator."""
    info = get_worker_info()
    if info is None:
        return
    if callable(worker_seeding):
        seed = worker_seeding(info)
        torch.manual_seed(seed)
        np.random.seed(seed % (2**32 - 1))
        random.seed(seed)
    elif worker_seeding == "all":
        np.random.seed(info.seed % (2**32 - 1))


def _refuse(**unsupported: bool) -> None:
    for name, refused in unsupported.items():
        if refused:
            raise NotImplementedError(
                f"create_loader: {name} is not supported by fastload's create_loader; "
                "use timm's own create_loader for it"
            )


def create_loader(
    dataset: Any,
    input_size: int | Sequence[int],
    batch_size: int,
    is_training: bool = False,
    no_aug: bool = False,
    re_prob: float = 0.0,
    re_mode: str = "const",
    re_count: int = 1,
    re_split: bool = False,
    train_crop_mode: str | None = None,
    scale: Sequence[float] | None = None,
    ratio: Sequence[float] | None = None,
    hflip: float = 0.5,
    vflip: float = 0.0,
    color_jitter: float | Sequence[float] | None = 0.4,
    color_jitter_prob: float | None = None,
    grayscale_prob: float = 0.0,
    gaussian_blur_prob: float = 0.0,
    auto_augment: str | None = None,
    num_aug_repeats: int = 0,
    num_aug_splits: int = 0,
    interpolation: str = "bilinear",
    mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
    std: Sequence[float] = IMAGENET_DEFAULT_STD,
    num_workers: int = 1,
    distributed: bool = False,
    crop_pct: float | None = None,
    crop_mode: str | None = None,
    crop_border_pixels: int | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    pin_memory: bool = False,
    fp16: bool = False,
    img_dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    use_prefetcher: bool = True,
    use_multi_epochs_loader: bool = False,
    persistent_workers: bool = True,
    worker_seeding: str | Callable[[Any], int] = "all",
    tf_preprocessing: bool = False,
    input_size_choices: Sequence[Any] | None = None,
    batch_size_choices: Sequence[int] | None = None,
    batch_choice_weights: Sequence[float] | None = None,
    batch_choice_seed: int = 0,
    batch_choice_schedule: str = "constant",
    batch_schedule_epochs: int | None = None,
    batch_schedule_spread: float = 0.65,
    batch_schedule_random_mix: float = 0.1,
    num_batches: int | None = None,
    *,
    channels_last: bool = False,
) -> PrefetchLoader:
    """timm's ``create_loader``, one import away: the same arguments, a loader with
    the contract of timm's ``PrefetchLoader``.

    The dataset's ``transform`` becomes the crop alone (to uint8, in the workers);
    flips, ``auto_augment`` (or colour jitter), grayscale and blur run on the device
    batch, then normalisation in ``img_dtype``, then MixUp/CutMix (from a
    ``FastCollateMixup`` given as ``collate_fn``) and random erasing, as in timm.
    ``use_prefetcher=False`` runs the same on the CPU. ``device`` None is the current
    CUDA device, else the CPU; ``channels_last`` (not timm's) sets the memory format.
    ``use_multi_epochs_loader`` is honoured by persistent workers. ``num_aug_splits``
    (or timm's ``AugMixDataset``) makes timm's split batches on the device;
    ``input_size_choices`` draws each batch's size by timm's ``ScheduledBatchSampler``.

    Raises:
        NotImplementedError: ``tf_preprocessing``, or ``num_aug_repeats`` without
            ``distributed`` (timm refuses it too).
        ValueError: An unknown ``auto_augment``, ``re_mode``, ``crop_mode`` or
            ``train_crop_mode``, ``num_aug_splits`` with a ``FastCollateMixup``,
            ``input_size_choices`` outside training or with ``num_aug_splits``, or
            another argument out of its range (named in the message).

    Example:
        >>> import fastload, tempfile
        >>> root = fastload.make_image_folder(
        ...     tempfile.mkdtemp(), num_classes=2, images_per_class=4, size=(64, 48))
        >>> loader = create_loader(fastload.ImageFolder(root), (3, 32, 32), batch_size=4,
        ...                        is_training=True, num_workers=0, device="cpu")
        >>> images, target = next(iter(loader))
        >>> images.shape, images.dtype, target.shape
        (torch.Size([4, 3, 32, 32]), torch.float32, torch.Size([4]))
    """
    _refuse(
        tf_preprocessing=tf_preprocessing,
        num_aug_repeats_without_distributed=bool(num_aug_repeats) and not distributed,
    )
    size = _size(input_size)
    if crop_border_pixels is not None:
        check_int(crop_border_pixels, "crop_border_pixels", low=0)
    augmenting = is_training and not no_aug
    given = dataset  # timm's AugMixDataset is read through: its split runs on the batch
    dataset, splits = split_source(dataset, num_aug_splits)
    crop = functools.partial(
        sample_transform, augmenting=augmenting, is_training=is_training, scale=scale,
        ratio=ratio, interpolation=interpolation, crop_pct=crop_pct, crop_mode=crop_mode,
        crop_border_pixels=crop_border_pixels, mean=mean, train_crop_mode=train_crop_mode,
        squash=not isinstance(input_size, int),
    )  # fmt: skip
    dataset.transform = crop(size)
    iterable = isinstance(dataset, IterableDataset)
    sampler = _sampler(dataset, distributed and not iterable, is_training, num_aug_repeats)
    mixup, mixup_source = None, None
    if collate_fn is not None and all(hasattr(collate_fn, a) for a in TIMM_ATTRIBUTES):
        mixup, mixup_source, collate_fn = (
            Mixup.from_timm(collate_fn, inplace=True),
            collate_fn,
            None,
        )
    augment = functools.partial(
        device_augment, augmenting=augmenting, hflip=hflip, vflip=vflip,
        color_jitter=color_jitter, color_jitter_prob=color_jitter_prob,
        grayscale_prob=grayscale_prob, gaussian_blur_prob=gaussian_blur_prob,
        auto_augment=auto_augment,
        interpolation=interpolation, mean=mean,
    )  # fmt: skip
    transform = augment(size)
    if splits and is_training:
        if mixup is not None:  # timm's train.py asserts it too: mixing would cross splits
            raise ValueError(
                "create_loader: num_aug_splits with a FastCollateMixup collate_fn; "
                "mix in the training loop (timm's Mixup) instead"
            )
        transform, collate_fn = split_batches(transform, collate_fn or default_collate, splits)
    batching: dict[str, Any] = {
        "batch_size": batch_size, "sampler": sampler, "drop_last": is_training,
        "shuffle": is_training and sampler is None and not iterable,
    }  # fmt: skip
    if input_size_choices is not None:  # train.py's --train-img-sizes
        sizes = scheduled_sizes(
            input_size_choices, input_size, mean, is_training=is_training, iterable=iterable,
            num_aug_splits=splits, use_multi_epochs_loader=use_multi_epochs_loader,
        )  # fmt: skip
        dataset, transform, batching = scheduled_batches(
            dataset, sampler, sizes, crop, augment, batch_size=batch_size,
            batch_size_choices=batch_size_choices, choice_weights=batch_choice_weights,
            seed=batch_choice_seed, num_batches=num_batches,
            choice_schedule=batch_choice_schedule, schedule_epochs=batch_schedule_epochs,
            schedule_spread=batch_schedule_spread, schedule_random_mix=batch_schedule_random_mix,
        )  # fmt: skip
    target = torch.device(device) if device is not None else default_device()
    if not use_prefetcher:
        target = torch.device("cpu")
    mixup_in_workers = target.type == "cpu" and num_workers > 0 and mixup is not None
    if target.type == "cpu" and num_workers > 0 and (transform is not None or mixup_in_workers):
        # no GPU to run the batch modules on: each worker augments and mixes the batches
        # it makes (on uint8, as timm's FastCollateMixup), so that work runs on every
        # core, as timm's does, not in the training loop
        collate_fn = AugmentedCollate(
            collate_fn or default_collate, transform, mixup if mixup_in_workers else None
        )
        transform = None
    loader: FastLoader[Any] = FastLoader(
        dataset,
        **batching,
        num_workers=num_workers,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        worker_init_fn=functools.partial(_seed_worker, worker_seeding=worker_seeding),
        persistent_workers=persistent_workers and num_workers > 0,
    )
    prefetcher = DataPrefetcher(
        loader,
        device=target,
        mean=mean,
        std=std,
        dtype=torch.float16 if fp16 else img_dtype,  # timm: fp16 overrides img_dtype
        channels_last=channels_last,
        transform=transform,
    )
    eraser = erasing(re_prob if augmenting else 0.0, re_mode, re_count, re_split, splits)
    return PrefetchLoader(
        loader, prefetcher, dataset=given, mixup=mixup, mixup_source=mixup_source,
        random_erasing=eraser, channels_last=channels_last, mixup_in_workers=mixup_in_workers,
    )  # fmt: skip


def _size(input_size: int | Sequence[int]) -> tuple[int, int]:
    """(height, width) from timm's int, (H, W) or (C, H, W)."""
    whole = isinstance(input_size, Sequence) and not isinstance(input_size, str)
    sizes = tuple(input_size)[-2:] if whole else (input_size, input_size)  # type: ignore[arg-type]
    sides = [s for s in sizes if isinstance(s, int) and not isinstance(s, bool) and s > 0]
    if len(sizes) != 2 or len(sides) != 2:
        raise ValueError(f"input_size must be an int, (H, W) or (C, H, W), got {input_size!r}")
    return sides[0], sides[1]


def _sampler(dataset: Any, distributed: bool, is_training: bool, num_aug_repeats: int) -> Any:
    """timm's choice: repeated augmentation or a DistributedSampler in training,
    the ordered split in evaluation; none without ``distributed``."""
    if not distributed:
        return None
    if not is_training:
        return OrderedDistributedSampler(dataset)
    if num_aug_repeats:
        return RepeatAugSampler(dataset, num_repeats=num_aug_repeats)
    return DistributedSampler(dataset)
