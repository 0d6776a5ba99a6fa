"""The per-pixel operations of the augmentation policies, on the batch: invert, posterize,
solarize, sharpness, autocontrast, equalize and Gaussian noise, with torchvision v2's
names and meanings, and each sample's own magnitude where the operation has one.

The functions take per-sample magnitudes as tensors of shape (N,), so that a policy can
give every sample its own; the modules draw whether each sample is changed (``p``).
Autocontrast and equalisation are torchvision's own kernels, which already work a batch
(each image and channel its own statistics) in one call.
"""

from __future__ import annotations

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor
from torch.nn import functional as F

from fastload.gpu.base import BatchTransform, Params, blend_where, finite, max_value
from fastload.gpu.keyed import keyed_normal

__all__ = [
    "GaussianNoise",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
    "adjust_sharpness",
    "autocontrast",
    "equalize",
    "invert",
    "posterize",
    "solarize",
]


def _per_sample(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def invert(images: Tensor) -> Tensor:
    """``255 - x`` (uint8) or ``1 - x`` (floats)."""
    return TF.invert(images)


def posterize(images: Tensor, bits: Tensor) -> Tensor:
    """Keep each sample's top ``bits[i]`` bits (0 to 8) of every channel value."""
    if images.is_floating_point():  # torchvision's float form: that many levels on 0..1
        levels = _per_sample(torch.pow(2.0, bits.to(images.dtype)))
        return (images * levels).floor_().clamp_(min=0).minimum(levels - 1).div_(levels)
    shift = 8 - bits.to(torch.int64)
    mask = torch.bitwise_left_shift(torch.full_like(shift, 255), shift) & 255
    return images & _per_sample(mask.to(torch.uint8))


def solarize(images: Tensor, threshold: Tensor) -> Tensor:
    """Invert the values at or above each sample's ``threshold`` (on the image's scale)."""
    at_or_above = images >= _per_sample(threshold.to(torch.float64))  # not rounded to uint8
    return torch.where(at_or_above, invert(images), images)


def adjust_sharpness(images: Tensor, factor: Tensor) -> Tensor:
    """Blend each sample with its 3x3-smoothed self (PIL's kernel, borders kept) by
    ``factor[i]``: 0 blurs, 1 is the identity, 2 sharpens; as torchvision rounds and
    truncates uint8."""
    height, width = images.shape[-2:]
    if images.numel() == 0 or height <= 2 or width <= 2:
        return images
    channels, floating = images.shape[1], images.is_floating_point()
    maths = images.dtype if floating else torch.float32
    kernel = torch.full((3, 3), 1 / 13, dtype=maths, device=images.device)
    kernel[1, 1] = 5 / 13
    out = images.to(maths, copy=True)
    blurred = F.conv2d(out, kernel.expand(channels, 1, 3, 3), groups=channels)
    if not floating:
        blurred = blurred.round_()
    inner = out[..., 1:-1, 1:-1]
    inner.add_((blurred - inner) * _per_sample((1 - factor.double()).to(maths)))
    out = out.clamp_(0, max_value(images.dtype))
    return out if floating else out.to(images.dtype)


def autocontrast(images: Tensor) -> Tensor:
    """Stretch each image's channels to the full range (torchvision's kernel)."""
    return TF.autocontrast(images)


def equalize(images: Tensor) -> Tensor:
    """Equalise each image's channel histograms (torchvision's kernel, PIL's lookup)."""
    return TF.equalize(images)


class _RandomPixelOp(BatchTransform):
    """Applies the operation to each sample with probability ``p`` (torchvision's 0.5)."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(self, p: float = 0.5, *, same_on_batch: bool = False, generator=None) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)

    def sample_params(self, shape, device, generator=None) -> Params:
        return {"apply": self._applies(shape[0], device, generator)}

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

    def __init__(self, bits: int, p: float = 0.5, *, same_on_batch=False, generator=None) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 8:
            raise ValueError(f"bits must be an int in [0, 8], got {bits!r}")
        self.bits = bits

    def operation(self, images: Tensor) -> Tensor:
        bits = torch.full((len(images),), self.bits, device=images.device)
        return posterize(images, bits)


class RandomSolarize(_RandomPixelOp):
    """Invert the values at or above ``threshold`` (on the image's own scale: 0..255 for
    uint8, 0..1 for floats), for each image with probability ``p``."""

    def __init__(
        self, threshold: float, p: float = 0.5, *, same_on_batch=False, generator=None
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
        self, sharpness_factor: float, p: float = 0.5, *, same_on_batch=False, generator=None
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
        generator=None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.mean, self.sigma, self.clip = finite(mean, "mean"), finite(sigma, "sigma"), clip
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma!r}")

    def sample_params(self, shape, device, generator=None) -> Params:
        rows = 1 if self.same_on_batch else shape[0]
        noise = None if generator is not None else keyed_normal(shape[0], shape[1:], device)
        if noise is not None:  # inside gpu.sample_seeds
            noise = noise[:rows]
        else:
            noise = torch.randn((rows, *shape[1:]), device=device, generator=generator)
        return {"noise": noise.expand(tuple(shape))}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        if images.is_floating_point():
            out = images + (self.mean + params["noise"].to(images.dtype) * self.sigma)
            return out.clamp(0, 1) if self.clip else out
        noise = (255 * self.mean + params["noise"] * (255 * self.sigma)).to(torch.int16)
        out = images + noise
        return (out.clamp(0, 255) if self.clip else out).to(torch.uint8)
