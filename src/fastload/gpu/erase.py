"""RandomErasing: a rectangle per sample, drawn by torchvision's algorithm, vectorised."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fastload._checks import finite, pair
from fastload.boxes import TRIES, sample_boxes
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import box_mask, erase

__all__ = ["RandomErasing"]


class RandomErasing(BatchTransform):
    """Erase a random rectangle of each image with probability ``p``.

    torchvision's ``RandomErasing``: ``scale``, ``ratio``, ``value``: a number or one per
    channel.

    Boxes follow torchvision's algorithm: up to 10 tries per image for a box that fits,
    else the image is left as it is; the tries of all images are drawn at once.

    Args:
        p: Probability of erasing a rectangle of each image.
        scale: The range of the rectangle's area, as a fraction of the image's.
        ratio: The range of the rectangle's aspect ratio.
        value: The erased pixels' value, on the image's own scale: one, or one per
            channel.
        same_on_batch: One rectangle for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``scale`` outside [0, 1], a ``ratio`` that is not positive, a range
            with min > max, a ``value`` that is not finite, or ``p`` not a probability; on
            a call, a ``value`` per channel for another number of channels.

    Example:
        >>> eraser = RandomErasing(p=1.0, scale=(0.25, 0.25), ratio=(1.0, 1.0))
        >>> erased = eraser(torch.ones(2, 3, 8, 8))
        >>> (erased[:, 0] == 0).sum(dim=(1, 2)).tolist()  # a 4x4 square of each image
        [16, 16]
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: float | Sequence[float] = 0.0,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
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

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, _, height, width = shape
        uniforms = self._rand(n, TRIES, 4, device=device, generator=generator)
        boxes = sample_boxes(
            torch.full((n,), height, device=device),
            torch.full((n,), width, device=device),
            uniforms,
            self.scale,
            self.ratio,
            erasing=True,
        )
        return {
            "apply": self._applies(n, device, generator) & boxes.found,
            "top": boxes.top,
            "left": boxes.left,
            "height": boxes.height,
            "width": boxes.width,
        }

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
