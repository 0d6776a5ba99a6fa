"""Colour batch transforms: per-sample factors broadcast over the batch, no Python loop."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from fastload.gpu.base import (
    BatchTransform,
    Params,
    blend_where,
    finite,
    max_value,
    pair,
    restore,
    to_float,
)

__all__ = [
    "ColorJitter",
    "Normalize",
    "RandomGrayscale",
    "ToDtype",
    "hsv_to_rgb",
    "normalize",
    "rgb_to_hsv",
]

# ITU-R 601-2 luma, torchvision's weights.
_LUMA = (0.2989, 0.587, 0.114)


def grayscale(images: Tensor) -> Tensor:
    """(N, 1, H, W) luma of float RGB images."""
    r, g, b = images.unbind(dim=1)
    return (_LUMA[0] * r + _LUMA[1] * g + _LUMA[2] * b).unsqueeze(1)


def rgb_to_hsv(rgb: Tensor) -> Tensor:
    """RGB in [0, 1] to HSV in [0, 1] (hue as a fraction of a turn), batched (N, 3, H, W)."""
    r, g, b = rgb.unbind(dim=1)
    maxc, _ = rgb.max(dim=1)
    minc, _ = rgb.min(dim=1)
    chroma = maxc - minc
    saturation = chroma / torch.where(maxc == 0, torch.ones_like(maxc), maxc)
    safe = torch.where(chroma == 0, torch.ones_like(chroma), chroma)
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    hue = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.where(chroma == 0, torch.zeros_like(hue), hue)
    hue = (hue / 6.0) % 1.0
    return torch.stack((hue, saturation, maxc), dim=1)


@functools.cache
def _sector_table(device: torch.device) -> Tensor:
    """For each of the six hue sectors, which of (v, q, p, t) each channel takes; made
    once per device, as a tensor built from a list is a blocking host-to-device copy."""
    rows = [[0, 3, 2], [1, 0, 2], [2, 0, 3], [2, 1, 0], [3, 2, 0], [0, 2, 1]]
    return torch.tensor(rows, device=device)


def hsv_to_rgb(hsv: Tensor) -> Tensor:
    """The inverse of :func:`rgb_to_hsv`, batched (N, 3, H, W)."""
    hue, saturation, value = hsv.unbind(dim=1)
    sector = torch.floor(hue * 6.0)
    fraction = hue * 6.0 - sector
    sector = sector.long() % 6
    p = (value * (1.0 - saturation)).clamp(0.0, 1.0)
    q = (value * (1.0 - saturation * fraction)).clamp(0.0, 1.0)
    t = (value * (1.0 - saturation * (1.0 - fraction))).clamp(0.0, 1.0)
    table = _sector_table(hsv.device)
    candidates = torch.stack((value, q, p, t), dim=1)  # (N, 4, H, W)
    choice = table[sector].permute(0, 3, 1, 2)  # (N, 3, H, W)
    return candidates.gather(1, choice)


def _range(value: float | Sequence[float] | None, name: str, *, center: float, bound: float | None):
    """torchvision's ColorJitter argument: a number v means [center - v, center + v]."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if finite(value, name) < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")
        low, high = center - value, center + value
        if bound is None:
            low = max(low, 0.0)
    else:
        low, high = pair(value, name)
    if bound is not None and not -bound <= low <= high <= bound:
        raise ValueError(f"{name} values must lie in [-{bound}, {bound}], got {value!r}")
    if bound is None and low < 0:
        raise ValueError(f"{name} values must be non-negative, got {value!r}")
    return None if (low, high) == (center, center) else (low, high)


def _blend(images: Tensor, other: Tensor, factor: Tensor, bound: float) -> Tensor:
    return (factor * images + (1.0 - factor) * other).clamp(0.0, bound)


class ColorJitter(BatchTransform):
    """Per-sample brightness, contrast, saturation and hue, as torchvision's ColorJitter.

    Arguments mean what they mean in torchvision (a number ``v`` is the range
    ``[1 - v, 1 + v]``, hue ``[-v, v]`` with ``v <= 0.5``). Each sample draws its own
    factors; the order of the four operations is drawn once per batch (torchvision draws
    it once per call, which for a batch is the same), on the CPU so that applying it
    never waits for the GPU.
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    rgb_only = True
    OPERATIONS = ("brightness", "contrast", "saturation", "hue")

    def __init__(
        self,
        brightness: float | Sequence[float] | None = None,
        contrast: float | Sequence[float] | None = None,
        saturation: float | Sequence[float] | None = None,
        hue: float | Sequence[float] | None = None,
        *,
        p: float = 1.0,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.brightness = _range(brightness, "brightness", center=1.0, bound=None)
        self.contrast = _range(contrast, "contrast", center=1.0, bound=None)
        self.saturation = _range(saturation, "saturation", center=1.0, bound=None)
        self.hue = _range(hue, "hue", center=0.0, bound=0.5)

    def sample_params(self, shape, device, generator=None) -> Params:
        n = shape[0]
        # The order decides Python control flow, so it lives on the CPU: reading it from
        # the GPU would stall the stream. A CUDA generator cannot draw it; then the
        # global CPU generator does (torch.manual_seed makes it reproducible).
        cpu_generator = (
            generator if generator is not None and generator.device.type == "cpu" else None
        )
        params: Params = {
            "apply": self._applies(n, device, generator),
            "order": torch.randperm(4, generator=cpu_generator),
        }
        for name in self.OPERATIONS:
            limits = getattr(self, name)
            if limits is not None:
                params[name] = self._uniform(n, *limits, device=device, generator=generator)
        return params

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        bound = max_value(images.dtype)
        out = to_float(images)
        for index in params["order"].tolist():
            name = self.OPERATIONS[index]
            if name not in params:
                continue
            factor = params[name].to(out.dtype).view(-1, 1, 1, 1)
            if name == "brightness":
                out = (out * factor).clamp(0.0, bound)
            elif name == "contrast":
                mean = grayscale(out).mean(dim=(1, 2, 3), keepdim=True)
                out = _blend(out, mean, factor, bound)
            elif name == "saturation":
                out = _blend(out, grayscale(out), factor, bound)
            else:
                hsv = rgb_to_hsv(out / bound)
                hue = (hsv[:, 0] + factor.view(-1, 1, 1)) % 1.0
                out = hsv_to_rgb(torch.stack((hue, hsv[:, 1], hsv[:, 2]), dim=1)) * bound
        return blend_where(params["apply"], restore(out, images.dtype), images)


class RandomGrayscale(BatchTransform):
    """Turn each image to grayscale (kept as 3 channels) with probability ``p``."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    rgb_only = True

    def __init__(self, p: float = 0.1, *, same_on_batch: bool = False, generator=None) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)

    def sample_params(self, shape, device, generator=None) -> Params:
        return {"apply": self._applies(shape[0], device, generator)}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        gray = restore(grayscale(to_float(images)), images.dtype).expand_as(images)
        return blend_where(params["apply"], gray, images)


def normalize(pixels: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    """``(pixels - mean) / std`` as one fused multiply-add, ``scale`` and ``shift`` from
    :meth:`Normalize.affine`: fastload's one normalisation, for ``Normalize`` and for
    ``DataPrefetcher(mean=..., std=...)``."""
    return torch.addcmul(shift, pixels, scale)


class Normalize(BatchTransform):
    """``(image - mean) / std`` per channel, on floating images (see ``ToDtype``)."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"mean and std differ in length: {len(mean)} and {len(std)}")
        self.mean = tuple(finite(m, "mean") for m in mean)
        self.std = tuple(finite(s, "std") for s in std)
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std must be positive, got {tuple(std)}")
        self._cache: dict[tuple[torch.device, torch.dtype, bool], tuple[Tensor, Tensor]] = {}

    def affine(
        self, device: torch.device, dtype: torch.dtype, *, uint8: bool = False
    ) -> tuple[Tensor, Tensor]:
        """``(scale, shift)`` of shape (1, C, 1, 1) with ``normalised = pixel * scale +
        shift``; ``uint8=True`` folds the division by 255 into ``scale``. Made once per
        device and dtype: a tensor built from a list is a blocking host-to-device copy."""
        key = (device, dtype, uint8)
        if key not in self._cache:
            mean = torch.tensor(self.mean, dtype=torch.float64).view(1, -1, 1, 1)
            std = torch.tensor(self.std, dtype=torch.float64).view(1, -1, 1, 1)
            scale, shift = (1 / std) / (255 if uint8 else 1), -mean / std
            self._cache[key] = (scale.to(device, dtype), shift.to(device, dtype))
        return self._cache[key]

    def sample_params(self, shape, device, generator=None) -> Params:
        return {}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        if not images.is_floating_point():
            raise TypeError(
                f"Normalize expects floating images, got {images.dtype}; convert with ToDtype first"
            )
        if images.shape[1] != len(self.mean):
            raise ValueError(
                f"Normalize has mean/std for {len(self.mean)} channels, "
                f"images have {images.shape[1]}"
            )
        pixels = to_float(images)
        return normalize(pixels, *self.affine(pixels.device, pixels.dtype)).to(images.dtype)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state


class ToDtype(BatchTransform):
    """Convert the dtype, scaling values between integer and float ranges (uint8 0..255 to
    float 0..1) when ``scale``: torchvision's ``to_dtype``, on the whole batch."""

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(self, dtype: torch.dtype, scale: bool = True) -> None:
        super().__init__()
        self.dtype = dtype
        self.scale = scale

    def sample_params(self, shape, device, generator=None) -> Params:
        return {}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        from torchvision.transforms.v2.functional import to_dtype

        return to_dtype(images, self.dtype, scale=self.scale)
