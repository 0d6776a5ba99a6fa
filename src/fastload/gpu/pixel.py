"""The per-pixel modules: invert, posterize, solarize, sharpness, autocontrast, equalize
and Gaussian noise, with torchvision v2's names and meanings; each draws whether each
sample is changed (``p``) and calls its kernel in :mod:`fastload.gpu.functional.pixel`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastload._checks import check_int, finite
from fastload.gpu.base import BatchTransform, Params, blend_where
from fastload.gpu.functional import (
    add_noise,
    adjust_sharpness,
    autocontrast,
    equalize,
    invert,
    max_value,
    posterize,
    solarize,
)
from fastload.gpu.kinds import CoinTransform

__all__ = [
    "GaussianNoise",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
]


class _RandomPixelOp(CoinTransform):
    """Applies the operation to each sample with probability ``p`` (torchvision's 0.5)."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def operation(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return blend_where(params["apply"], self.operation(images), images)


class RandomInvert(_RandomPixelOp):
    """Invert each image with probability ``p``."""

    def operation(self, images: Tensor) -> Tensor:
        return invert(images)


class RandomAutocontrast(_RandomPixelOp):
    """Autocontrast each image with probability ``p``."""

    def operation(self, images: Tensor) -> Tensor:
        return autocontrast(images)


class RandomEqualize(_RandomPixelOp):
    """Equalise each image's histogram with probability ``p``."""

    def operation(self, images: Tensor) -> Tensor:
        return equalize(images)


class RandomPosterize(_RandomPixelOp):
    """Keep the top ``bits`` bits of each value, for each image with probability ``p``."""

    def __init__(
        self,
        bits: int,
        p: float = 0.5,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.bits = check_int(bits, "bits", low=0, high=8)

    def operation(self, images: Tensor) -> Tensor:
        bits = torch.full((len(images),), self.bits, device=images.device)
        return posterize(images, bits)


class RandomSolarize(_RandomPixelOp):
    """Invert the values at or above ``threshold`` (on the image's own scale: 0..255 for
    uint8, 0..1 for floats), for each image with probability ``p``."""

    def __init__(
        self,
        threshold: float,
        p: float = 0.5,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.threshold = finite(threshold, "threshold")

    def operation(self, images: Tensor) -> Tensor:
        if self.threshold > max_value(images.dtype):
            raise ValueError(
                f"threshold {self.threshold} is above the largest {images.dtype} value "
                f"{max_value(images.dtype):g}: give it on the image's own scale"
            )
        threshold = torch.full((len(images),), self.threshold, device=images.device)
        return solarize(images, threshold)


class RandomAdjustSharpness(_RandomPixelOp):
    """Sharpen (``sharpness_factor`` > 1) or blur (< 1) each image with probability ``p``."""

    def __init__(
        self,
        sharpness_factor: float,
        p: float = 0.5,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.sharpness_factor = finite(sharpness_factor, "sharpness_factor")
        if self.sharpness_factor < 0:
            raise ValueError(f"sharpness_factor must be >= 0, got {sharpness_factor!r}")

    def operation(self, images: Tensor) -> Tensor:
        factor = torch.full((len(images),), self.sharpness_factor, device=images.device)
        return adjust_sharpness(images, factor)


class GaussianNoise(BatchTransform):
    """Add Gaussian noise of ``mean`` and ``sigma`` (on the 0..1 scale) to every image, then
    clip to the valid range if ``clip``; uint8 as torchvision adds it (noise scaled by 255
    and truncated to integers)."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(
        self,
        mean: float = 0.0,
        sigma: float = 0.1,
        clip: bool = True,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.mean, self.sigma, self.clip = finite(mean, "mean"), finite(sigma, "sigma"), clip
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma!r}")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {"noise": self._normal(shape[0], *shape[1:], device=device, generator=generator)}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return add_noise(images, params["noise"], mean=self.mean, sigma=self.sigma, clip=self.clip)
