"""timm's transform arguments split into fastload's stages: the crop for the workers,
the augmentation for the uint8 device batch, and the erasing after normalisation
(the order of timm's ``transforms_factory`` and ``PrefetchLoader``)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from fastload.gpu.blur import GaussianBlur
from fastload.gpu.color import ColorJitter, RandomGrayscale
from fastload.gpu.geometric import RandomHorizontalFlip, RandomVerticalFlip
from fastload.integrations.timm.augment import augment_from_string
from fastload.integrations.timm.erasing import RandomErasing
from fastload.integrations.timm.transforms import EvalCrop, KeepRatioCrop, TrainCrop, train_crop

__all__ = ["device_augment", "erasing", "sample_transform"]


def sample_transform(
    size: tuple[int, int],
    *,
    augmenting: bool,
    is_training: bool,
    scale: Sequence[float] | None,
    ratio: Sequence[float] | None,
    interpolation: str,
    crop_pct: float | None,
    crop_mode: str | None,
    crop_border_pixels: int | None,
    mean: Sequence[float],
    train_crop_mode: str | None = None,
    squash: bool = False,
) -> TrainCrop | KeepRatioCrop | EvalCrop:
    """The dataset's transform: timm's ``train_crop_mode`` crop in training; with
    ``no_aug``, timm's no-aug train transform: torchvision's ``Resize`` and centre crop,
    which squash the image to the size when timm was given a tuple (``squash``, as
    train.py does) and resize the shorter side when it was given an int; in evaluation,
    timm's eval crop."""
    if augmenting:
        return train_crop(size, train_crop_mode, scale, ratio, interpolation)
    if is_training:
        mode = "squash" if squash else "center"
        return EvalCrop(size, crop_pct=1.0, crop_mode=mode, interpolation=interpolation)
    return EvalCrop(
        size, crop_pct=crop_pct or 0.875, crop_mode=crop_mode or "center",
        interpolation=interpolation, fill=[round(255 * m) for m in mean],
        border_pixels=crop_border_pixels or 0,
    )  # fmt: skip


def device_augment(
    size: tuple[int, int],
    *,
    augmenting: bool,
    hflip: float,
    vflip: float,
    color_jitter: float | Sequence[float] | None,
    color_jitter_prob: float | None,
    grayscale_prob: float,
    gaussian_blur_prob: float,
    auto_augment: str | None,
    interpolation: str,
    mean: Sequence[float],
) -> nn.Sequential | None:
    """timm's train transforms after the crop, as batch modules on uint8: flips, the
    ``auto_augment`` policy or else colour jitter (timm turns jitter off under a policy
    unless the string holds ``3a``), grayscale, a 23-pixel Gaussian blur."""
    if not augmenting:
        return None
    modules: list[nn.Module] = []
    if hflip > 0:
        modules.append(RandomHorizontalFlip(p=hflip))
    if vflip > 0:
        modules.append(RandomVerticalFlip(p=vflip))
    jitter = color_jitter is not None
    if auto_augment:
        jitter = jitter and "3a" in auto_augment
        modules.append(
            augment_from_string(
                auto_augment, image_size=min(size), mean=mean, interpolation=interpolation
            )
        )
    if jitter and color_jitter is not None:
        factors = (
            (float(color_jitter),) * 3
            if isinstance(color_jitter, (int, float))
            else tuple(float(f) for f in color_jitter)
        )
        if len(factors) not in (3, 4):
            raise ValueError(
                f"color_jitter must be a number or 3 or 4 numbers, got {color_jitter!r}"
            )
        p = 1.0 if color_jitter_prob is None else color_jitter_prob
        modules.append(ColorJitter(*factors, p=p))
    if grayscale_prob:
        modules.append(RandomGrayscale(p=grayscale_prob))
    if gaussian_blur_prob:
        modules.append(GaussianBlur(23, sigma=(0.1, 2.0), p=gaussian_blur_prob))
    return nn.Sequential(*modules) if modules else None


def erasing(
    re_prob: float, re_mode: str, re_count: int, re_split: bool, num_aug_splits: int = 0
) -> RandomErasing | None:
    """timm's erasing in its PrefetchLoader: 1 to ``re_count`` boxes; ``re_split``
    leaves the first half of the batch clean (the clean split of ``num_aug_splits``).
    In place, as timm's: the batch is the loader's own, fresh from normalisation."""
    if re_prob <= 0:
        return None
    return RandomErasing(
        p=re_prob,
        mode=re_mode,
        max_count=re_count,
        num_splits=(num_aug_splits or 2) if re_split else 0,
        inplace=True,
    )
