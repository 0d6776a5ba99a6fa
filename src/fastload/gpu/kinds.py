"""Two kinds of module, each a base: a coin per sample and nothing else to draw
(:class:`CoinTransform`), and resampling from elsewhere in the image with an
interpolation and a fill (:class:`ResamplingTransform`)."""

from __future__ import annotations

import torch
from torchvision.transforms import InterpolationMode

from fastload.gpu.arguments import check_fill, interpolation_name
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional.geometry import Fill

__all__ = ["CoinTransform", "ResamplingTransform"]


class CoinTransform(BatchTransform):
    """A transform whose only draw is each sample's coin: applied with probability ``p``
    (torchvision's 0.5 by default), its own coin per sample."""

    def __init__(
        self,
        p: float = 0.5,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        return {"apply": self._applies(shape[0], device, generator)}


class ResamplingTransform(BatchTransform):
    """A transform that takes each output pixel from elsewhere in the image: with
    ``interpolation`` (nearest or bilinear), and ``fill`` where it comes from outside."""

    def __init__(
        self,
        interpolation: InterpolationMode | str,
        fill: Fill,
        *,
        p: float = 1.0,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.interpolation = interpolation_name(interpolation)
        self.fill = check_fill(fill)
