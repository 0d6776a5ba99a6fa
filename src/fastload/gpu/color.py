"""Colour batch transforms: per-sample factors broadcast over the batch, no Python loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from fastload._checks import finite, pair
from fastload.finishing import Statistics
from fastload.gpu.base import BatchTransform, Params, blend_where
from fastload.gpu.functional import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    grayscale,
    max_value,
    normalize,
    restore,
    to_float,
)
from fastload.gpu.rows import in_runs

__all__ = ["ColorJitter", "Normalize", "RandomGrayscale", "ToDtype", "normalize"]


def _range(
    value: float | Sequence[float] | None, name: str, *, center: float, bound: float | None
) -> tuple[float, float] | None:
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


class ColorJitter(BatchTransform):
    """Per-sample brightness, contrast, saturation and hue, as torchvision's ColorJitter.

    Arguments mean what they mean in torchvision (a number ``v`` is the range
    ``[1 - v, 1 + v]``, hue ``[-v, v]`` with ``v <= 0.5``). Each sample draws its own
    factors; the order of the four operations is drawn once per batch (torchvision draws
    it once per call, which for a batch is the same), on the CPU so that applying it
    never waits for the GPU.

    Args:
        brightness: A number ``v`` for ``[max(0, 1 - v), 1 + v]``, or a (min, max) range
            of factors; None leaves it.
        contrast: As ``brightness``, for the contrast factor.
        saturation: As ``brightness``, for the saturation factor.
        hue: A number ``v`` for ``[-v, v]``, or a (min, max) range within [-0.5, 0.5].
        p: Probability of changing each image.
        same_on_batch: One set of factors for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A negative or non-finite number, a range with min > max, a negative
            factor, a ``hue`` outside [-0.5, 0.5], or ``p`` not a probability; on a call,
            images without 3 channels.

    Example:
        >>> images = torch.full((2, 3, 1, 1), 100, dtype=torch.uint8)
        >>> ColorJitter(brightness=(2.0, 2.0))(images).flatten().tolist()
        [200, 200, 200, 200, 200, 200]
        >>> _ = torch.manual_seed(0)
        >>> jittered = ColorJitter(brightness=0.5)(torch.full((4, 3, 2, 2), 0.5))
        >>> jittered[:, 0, 0, 0].unique().numel()  # each sample its own factor
        4
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
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.brightness = _range(brightness, "brightness", center=1.0, bound=None)
        self.contrast = _range(contrast, "contrast", center=1.0, bound=None)
        self.saturation = _range(saturation, "saturation", center=1.0, bound=None)
        self.hue = _range(hue, "hue", center=0.0, bound=0.5)

    _ADJUST: ClassVar[dict[str, Callable[..., Tensor]]] = {
        "brightness": adjust_brightness,
        "contrast": adjust_contrast,
        "saturation": adjust_saturation,
        "hue": adjust_hue,
    }

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        params: Params = {
            "apply": self._applies(n, device, generator),
            "order": self._permutation(4, generator),  # on the host, one for the batch
        }
        for name in self.OPERATIONS:
            limits = getattr(self, name)
            if limits is not None:
                params[name] = self._uniform(n, *limits, device=device, generator=generator)
        return params

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        bound = max_value(images.dtype)
        order = [self.OPERATIONS[i] for i in params["order"].tolist()]
        drawn = [name for name in order if name in params]

        def jitter(chosen: Tensor, rows: slice) -> Tensor:
            out = to_float(chosen)
            for name in drawn:
                out = self._ADJUST[name](out, params[name][rows], bound=bound)
            return restore(out, images.dtype)

        return blend_where(params["apply"], in_runs(images, jitter), images)


class RandomGrayscale(BatchTransform):
    """Turn each image to grayscale (kept as 3 channels) with probability ``p``.

    Args:
        p: Probability of changing each image.
        same_on_batch: One coin for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible coins.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1]; on a call, images without 3
            channels.

    Example:
        >>> red = torch.tensor([255, 0, 0], dtype=torch.uint8).view(1, 3, 1, 1)
        >>> RandomGrayscale(p=1.0)(red).flatten().tolist()
        [76, 76, 76]
    """

    default_p = 0.5

    targets = "pass"  # masks, boxes and keypoints stay as they are

    rgb_only = True

    def __init__(
        self,
        p: float = 0.1,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p, same_on_batch=same_on_batch, generator=generator)

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        gray = restore(grayscale(to_float(images)), images.dtype).expand_as(images)
        return blend_where(params["apply"], gray, images)


class Normalize(BatchTransform):
    """``(image - mean) / std`` per channel, on floating images (see ``ToDtype``).

    Args:
        mean: One mean per channel.
        std: One standard deviation per channel.

    Raises:
        ValueError: ``mean`` and ``std`` of different lengths, values that are not finite,
            a ``std`` that is not positive; on a call, images with another number of
            channels.
        TypeError: On a call, images that are not floating (uint8: use ``ToDtype`` first).

    Example:
        >>> images = torch.tensor([0.0, 0.5, 1.0]).view(1, 1, 1, 3)
        >>> Normalize(mean=[0.5], std=[0.25])(images).flatten().tolist()
        [-2.0, 0.0, 2.0]
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.statistics = Statistics(mean, std)
        self.mean, self.std = self.statistics.mean, self.statistics.std

    @classmethod
    def from_statistics(
        cls, mean: Sequence[float], std: Sequence[float], scale: float = 1
    ) -> Normalize:
        """A ``Normalize`` for statistics on the pixel scale ``scale`` (1 or 255), read as
        :meth:`fastload.finishing.Statistics.read` reads them."""
        statistics = Statistics.read(mean, std, scale)
        return cls(statistics.mean, statistics.std)

    def affine(
        self, device: torch.device, dtype: torch.dtype, *, uint8: bool = False
    ) -> tuple[Tensor, Tensor]:
        """See :meth:`fastload.finishing.Statistics.affine`."""
        return self.statistics.affine(device, dtype, uint8=uint8)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
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

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state


class ToDtype(BatchTransform):
    """Convert the batch's dtype, scaling the values when ``scale``.

    Values are scaled between integer and float ranges (uint8 0..255 to float 0..1) when
    ``scale``: torchvision's ``to_dtype``, on the whole batch.

    Args:
        dtype: The output's dtype.
        scale: Scale the values to the new dtype's range; otherwise only cast them.

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.

    Example:
        >>> images = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2)
        >>> ToDtype(torch.float32)(images).flatten().tolist()
        [0.0, 1.0]
        >>> ToDtype(torch.float32, scale=False)(images).flatten().tolist()
        [0.0, 255.0]
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(self, dtype: torch.dtype, scale: bool = True) -> None:
        super().__init__()
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self.scale = scale

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        from torchvision.transforms.v2.functional import to_dtype

        out: Tensor = to_dtype(images, self.dtype, scale=self.scale)
        return out
