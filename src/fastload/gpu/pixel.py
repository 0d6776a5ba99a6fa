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

__all__ = [
    "GaussianNoise",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
]


class _RandomPixelOp(BatchTransform):
    """Applies the operation to each sample with probability ``p`` (torchvision's 0.5)."""

    default_p = 0.5

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def operation(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return blend_where(params["apply"], self.operation(images), images)


class RandomInvert(_RandomPixelOp):
    """Invert each image with probability ``p``.

    Args:
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1].

    Example:
        >>> images = torch.tensor([0, 100, 255], dtype=torch.uint8).view(1, 1, 1, 3)
        >>> RandomInvert(p=1.0)(images).flatten().tolist()
        [255, 155, 0]
    """

    def operation(self, images: Tensor) -> Tensor:
        return invert(images)


class RandomAutocontrast(_RandomPixelOp):
    """Autocontrast each image with probability ``p``.

    Each channel is stretched so that its darkest value becomes 0 and its brightest the
    largest of the dtype (1 for floats, 255 for uint8), as torchvision's ``autocontrast``.

    Args:
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1].

    Example:
        >>> images = torch.tensor([0.25, 0.5, 0.75]).view(1, 1, 1, 3)
        >>> RandomAutocontrast(p=1.0)(images).flatten().tolist()
        [0.0, 0.5, 1.0]
    """

    def operation(self, images: Tensor) -> Tensor:
        return autocontrast(images)


class RandomEqualize(_RandomPixelOp):
    """Equalise each image's histogram with probability ``p``.

    Args:
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1].

    Example:
        >>> images = (torch.arange(1024) // 256 * 10).to(torch.uint8).view(1, 1, 32, 32)
        >>> images.unique().tolist()  # four levels, 256 pixels each
        [0, 10, 20, 30]
        >>> RandomEqualize(p=1.0)(images).unique().tolist()
        [0, 85, 171, 255]
    """

    def operation(self, images: Tensor) -> Tensor:
        return equalize(images)


class RandomPosterize(_RandomPixelOp):
    """Keep the top ``bits`` bits of each value, for each image with probability ``p``.

    Args:
        bits: How many of the 8 bits to keep, 0 to 8.
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``bits`` is not an int in [0, 8], or ``p`` not a probability.

    Example:
        >>> images = torch.tensor([0, 100, 255], dtype=torch.uint8).view(1, 1, 1, 3)
        >>> RandomPosterize(bits=2, p=1.0)(images).flatten().tolist()
        [0, 64, 192]
    """

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
    """Invert the values at or above ``threshold``, for each image with probability ``p``.

    ``threshold`` is on the image's own scale: 0..255 for uint8, 0..1 for floats.

    Args:
        threshold: The smallest value that is inverted.
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: A ``threshold`` that is not finite, or ``p`` not a probability; on a
            call, a ``threshold`` above the images' largest value (128 for floats: 0..1).

    Example:
        >>> images = torch.tensor([0, 100, 255], dtype=torch.uint8).view(1, 1, 1, 3)
        >>> RandomSolarize(threshold=128, p=1.0)(images).flatten().tolist()
        [0, 100, 0]
    """

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
    """Sharpen (``sharpness_factor`` > 1) or blur (< 1) each image with probability ``p``.

    Args:
        sharpness_factor: 0 gives torchvision's smoothed image, 1 the image itself, 2 the
            smoothed image plus twice the image's difference from it.
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: A ``sharpness_factor`` that is negative or not finite, or ``p`` not a
            probability.

    Example:
        >>> point = torch.zeros(1, 1, 5, 5)
        >>> point[..., 2, 2] = 1
        >>> smoothed = RandomAdjustSharpness(0.0, p=1.0)(point)
        >>> (smoothed[0, 0, 1:4, 1:4] * 13).round().tolist()  # the 3x3 kernel, over 13
        [[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]
    """

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
    """Add Gaussian noise of ``mean`` and ``sigma`` (on the 0..1 scale) to every image.

    The result is clipped to the valid range if ``clip``; uint8 as torchvision adds it
    (noise scaled by 255 and truncated to integers).

    Args:
        mean: The noise's mean, on the 0..1 scale.
        sigma: The noise's standard deviation, on the 0..1 scale.
        clip: Clip the result to 0..1 (0..255 for uint8).
        same_on_batch: One noise image for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible noise.

    Raises:
        ValueError: A ``mean`` or ``sigma`` that is not finite, or a negative ``sigma``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> noisy = GaussianNoise(sigma=0.1)(torch.full((2, 3, 8, 8), 0.5))
        >>> noisy.shape, round(float((noisy - 0.5).std()), 1)
        (torch.Size([2, 3, 8, 8]), 0.1)
    """

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
