"""RandomErasing: a rectangle per sample, drawn by torchvision's algorithm, vectorised."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fastload._checks import finite, pair
from fastload.gpu.base import BatchTransform, Params, first_fit, log_uniform
from fastload.gpu.functional import box_mask, erase

__all__ = ["RandomErasing"]


class RandomErasing(BatchTransform):
    """Erase a random rectangle of each image with probability ``p`` (torchvision's
    ``RandomErasing``: ``scale``, ``ratio``, ``value``: a number or one per channel).

    Boxes follow torchvision's algorithm: up to 10 tries per image for a box that fits,
    else the image is left as it is; the tries of all images are drawn at once.
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    TRIES = 10

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: float | Sequence[float] = 0.0,
        *,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        self.scale = pair(scale, "scale")
        self.ratio = pair(ratio, "ratio")
        if not 0 <= self.scale[0] <= self.scale[1] <= 1 or self.ratio[0] <= 0:
            raise ValueError(
                f"scale must lie in [0, 1] and ratio be positive, got {scale!r}, {ratio!r}"
            )
        values = (value,) if isinstance(value, (int, float)) else tuple(value)
        self.value = tuple(finite(v, "value") for v in values)

    def sample_params(self, shape, device, generator=None) -> Params:
        n, _, height, width = shape
        draws = self._rand(n, self.TRIES, 4, device=device, generator=generator)
        erase_area = (
            height * width * (self.scale[0] + (self.scale[1] - self.scale[0]) * draws[..., 0])
        )
        log_low, log_high = log_uniform(*self.ratio)
        aspect = torch.exp(log_low + (log_high - log_low) * draws[..., 1])
        box_h = torch.sqrt(erase_area * aspect).round()
        box_w = torch.sqrt(erase_area / aspect).round()
        fits = (box_h < height) & (box_w < width)
        box_h, box_w, top_draw, left_draw = first_fit(
            fits, box_h, box_w, draws[..., 2], draws[..., 3]
        )
        top = (top_draw * (height - box_h + 1)).floor()
        left = (left_draw * (width - box_w + 1)).floor()
        apply = self._applies(n, device, generator) & fits.any(dim=1)
        return {"apply": apply, "top": top, "left": left, "height": box_h, "width": box_w}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        if len(self.value) not in (1, images.shape[1]):
            raise ValueError(
                f"value has {len(self.value)} entries, images have {images.shape[1]} channels"
            )
        mask = box_mask(
            params["top"],
            params["left"],
            params["height"],
            params["width"],
            (images.shape[-2], images.shape[-1]),
        )
        return erase(images, mask & params["apply"].view(-1, 1, 1, 1), self.value)
