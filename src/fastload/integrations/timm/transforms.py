"""The CPU half of timm's transforms, run per sample in the workers: the crop, resized,
as a uint8 CHW tensor (flips, colour, policies, normalisation and erasing run on the
device batch)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as TF

from fastload.collate import chw
from fastload.decode.opencv import decode_image
from fastload.transforms import DecodeRandomResizedCrop

__all__ = ["EvalCrop", "KeepRatioCrop", "TrainCrop", "interpolation_modes", "train_crop"]

CROP_MODES = ("center", "squash", "border")
TRAIN_CROP_MODES = ("rrc", "rkrc", "rkrr")
_MODES = {
    "nearest": InterpolationMode.NEAREST,
    "bilinear": InterpolationMode.BILINEAR,
    "bicubic": InterpolationMode.BICUBIC,
    "box": InterpolationMode.BOX,
    "hamming": InterpolationMode.HAMMING,
    "lanczos": InterpolationMode.LANCZOS,
}


def interpolation_modes(name: str) -> tuple[InterpolationMode, ...]:
    """timm's interpolation name as torchvision's modes: ``"random"`` is bilinear or
    bicubic, drawn per image."""
    if name == "random":
        return (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)
    if name not in _MODES:
        raise ValueError(f"interpolation must be one of {sorted(_MODES)} or 'random', got {name!r}")
    return (_MODES[name],)


def _tensor(image: Any) -> torch.Tensor:
    """A CHW uint8 tensor from a PIL image, an HWC array, a CHW tensor or encoded bytes."""
    if isinstance(image, Image.Image):
        tensor: torch.Tensor = TF.pil_to_tensor(image.convert("RGB"))
        return tensor
    if isinstance(image, (bytes, memoryview)):
        image = np.frombuffer(image, np.uint8)
    if isinstance(image, torch.Tensor) and image.ndim == 1:
        image = image.numpy()
    if isinstance(image, np.ndarray) and image.ndim == 1:  # still encoded
        image = decode_image(image)
    return chw(image)


class TrainCrop:
    """timm's ``RandomResizedCropAndInterpolation``, to a uint8 CHW tensor.

    A PIL image (timm's datasets) is cropped and resized by torchvision with timm's
    interpolation; an array, tensor or encoded image (fastload's datasets) by
    :class:`fastload.transforms.DecodeRandomResizedCrop`, which decodes only what the
    crop needs (antialiased bilinear).

    Example:
        >>> TrainCrop((32, 32))(Image.new("RGB", (64, 48))).shape
        torch.Size([3, 32, 32])
    """

    def __init__(
        self,
        size: tuple[int, int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
    ) -> None:
        self.size = size
        self.crops = [
            v2.RandomResizedCrop(size, scale=tuple(scale), ratio=tuple(ratio), interpolation=mode)
            for mode in interpolation_modes(interpolation)
        ]
        self.decoded = DecodeRandomResizedCrop(size, scale=scale, ratio=ratio)

    def __call__(self, image: Any) -> torch.Tensor:
        if isinstance(image, Image.Image):
            cropped = random.choice(self.crops)(image.convert("RGB"))
            tensor: torch.Tensor = TF.pil_to_tensor(cropped)
            return tensor
        return self.decoded(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.crops[0]!r})"


def train_crop(
    size: tuple[int, int],
    train_crop_mode: str | None,
    scale: Sequence[float] | None,
    ratio: Sequence[float] | None,
    interpolation: str,
) -> TrainCrop | KeepRatioCrop:
    """timm's training crop for ``train_crop_mode`` (None is ``"rrc"``), with timm's
    default ``scale`` and ``ratio`` for each mode."""
    mode = train_crop_mode or "rrc"
    if mode not in TRAIN_CROP_MODES:
        raise ValueError(f"train_crop_mode must be one of {TRAIN_CROP_MODES}, got {mode!r}")
    if mode == "rrc":
        return TrainCrop(
            size, scale=scale or (0.08, 1.0), ratio=ratio or (3 / 4, 4 / 3),
            interpolation=interpolation,
        )  # fmt: skip
    return KeepRatioCrop(
        size, scale=scale or (0.8, 1.0), ratio=ratio or (0.9, 1 / 0.9),
        interpolation=interpolation, random=mode == "rkrr",
    )  # fmt: skip


class KeepRatioCrop:
    """timm's ``rkrc``/``rkrr`` train crops, to a uint8 CHW tensor: ``ResizeKeepRatio``
    (the shorter side to the target, with probability 1/2 an area ``scale`` and with
    probability 1/2 an aspect ``ratio`` drawn), then the centre (``random=False``,
    ``rkrc``) or a random window (``rkrr``), reflect-padded where the image is smaller.

    The draws are timm's, from Python's ``random`` in timm's order, so a seeded run picks
    timm's sizes and windows.

    Example:
        >>> KeepRatioCrop((32, 32), random=True)(Image.new("RGB", (64, 48))).shape
        torch.Size([3, 32, 32])
    """

    def __init__(
        self,
        size: tuple[int, int],
        scale: Sequence[float] = (0.8, 1.0),
        ratio: Sequence[float] = (0.9, 1 / 0.9),
        interpolation: str = "bilinear",
        random: bool = False,
    ) -> None:
        if len(scale) != 2 or len(ratio) != 2 or min(*scale, *ratio) <= 0:
            raise ValueError(
                f"scale and ratio must be two positive numbers, got {scale!r}, {ratio!r}"
            )
        self.size, self.random = size, bool(random)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.modes = interpolation_modes(interpolation)

    def resized(self, height: int, width: int) -> list[int]:
        """timm's ``ResizeKeepRatio.get_params`` with ``random_scale_area``."""
        ratio = min(height / self.size[0], width / self.size[1])
        factors = (1.0, 1.0)
        if random.random() < 0.5:
            area = 1 / math.sqrt(random.uniform(*self.scale))  # an RRC-like area zoom
            factors = (area, area)
        if random.random() < 0.5:
            low, high = math.log(self.ratio[0]), math.log(self.ratio[1])
            aspect = math.sqrt(math.exp(random.uniform(low, high)))
            factors = (factors[0] / aspect, factors[1] * aspect)
        return [round(height * factors[0] / ratio), round(width * factors[1] / ratio)]

    def __call__(self, image: Any) -> torch.Tensor:
        pil = isinstance(image, Image.Image)
        pixels = image.convert("RGB") if pil else _tensor(image)
        height, width = TF.get_size(pixels)
        size = self.resized(height, width)
        mode = random.choice(self.modes) if len(self.modes) > 1 else self.modes[0]
        pixels = TF.resize(pixels, size, interpolation=mode, antialias=True)
        tensor: torch.Tensor = TF.pil_to_tensor(pixels) if pil else pixels
        return self._crop_or_pad(tensor)

    def _crop_or_pad(self, pixels: torch.Tensor) -> torch.Tensor:
        """timm's ``center_crop_or_pad`` / ``RandomCropOrPad`` with reflect padding."""
        (height, width), (out_h, out_w) = pixels.shape[-2:], self.size
        if self.random:  # a negative offset pads before the image
            top = int(math.copysign(random.randint(0, abs(height - out_h)), height - out_h))
            left = int(math.copysign(random.randint(0, abs(width - out_w)), width - out_w))
        else:
            pad_w, pad_h = max(out_w - width, 0), max(out_h - height, 0)
            top = round((height + pad_h - out_h) / 2) - pad_h // 2
            left = round((width + pad_w - out_w) / 2) - pad_w // 2
        padding = [
            max(-left, 0), max(-top, 0),
            max(left + out_w - width, 0), max(top + out_h - height, 0),
        ]  # fmt: skip
        if any(padding):
            pixels = TF.pad(pixels, padding, padding_mode="reflect")
        cropped: torch.Tensor = TF.crop(pixels, max(top, 0), max(left, 0), out_h, out_w)
        return cropped

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"random={self.random})"
        )


class EvalCrop:
    """timm's evaluation transform, to a uint8 CHW tensor: ``crop_mode`` ``"center"``
    (the shorter side to ``size / crop_pct``, then the centre), ``"squash"`` (both sides
    to ``size / crop_pct``, then the centre) or ``"border"`` (the longer side to it,
    then padded with ``fill``), after trimming ``border_pixels`` from each edge.

    Example:
        >>> EvalCrop((32, 32), crop_pct=0.875)(Image.new("RGB", (64, 48))).shape
        torch.Size([3, 32, 32])
    """

    def __init__(
        self,
        size: tuple[int, int],
        crop_pct: float = 0.875,
        crop_mode: str = "center",
        interpolation: str = "bilinear",
        fill: Sequence[float] = (0, 0, 0),
        border_pixels: int = 0,
    ) -> None:
        if crop_mode not in CROP_MODES:
            raise ValueError(f"crop_mode must be one of {CROP_MODES}, got {crop_mode!r}")
        if not 0 < crop_pct <= 10:
            raise ValueError(f"crop_pct must be a positive fraction, got {crop_pct!r}")
        self.size, self.crop_pct, self.crop_mode = size, float(crop_pct), crop_mode
        self.scale_size = (math.floor(size[0] / crop_pct), math.floor(size[1] / crop_pct))
        # bilinear for "random": evaluation is deterministic in timm too
        self.interpolation = interpolation_modes(interpolation)[0]
        self.fill = [float(f) for f in fill]
        self.border_pixels = int(border_pixels)

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = _tensor(image)
        if self.border_pixels:
            b = self.border_pixels
            pixels = pixels[:, b : pixels.shape[1] - b, b : pixels.shape[2] - b]
        height, width = pixels.shape[-2:]
        if self.crop_mode == "squash":
            resized = self.scale_size
        else:  # keep the aspect ratio: the shorter side fills (center), the longer (border)
            ratios = (self.scale_size[0] / height, self.scale_size[1] / width)
            ratio = min(ratios) if self.crop_mode == "border" else max(ratios)
            resized = (round(height * ratio), round(width * ratio))
        pixels = TF.resize(pixels, list(resized), interpolation=self.interpolation, antialias=True)
        if self.crop_mode == "border":
            pad_h, pad_w = max(0, self.size[0] - resized[0]), max(0, self.size[1] - resized[1])
            if pad_h or pad_w:
                padding = [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2]
                pixels = TF.pad(pixels, padding, fill=self.fill)
        cropped: torch.Tensor = TF.center_crop(pixels, list(self.size))
        return cropped

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, crop_pct={self.crop_pct}, "
            f"crop_mode={self.crop_mode!r})"
        )
