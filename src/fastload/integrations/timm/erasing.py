"""timm's random erasing on the device batch: up to ``count`` boxes per image, filled
with zeros, a random colour or per-pixel noise, after normalisation.

Per-pixel noise is drawn for the erased boxes alone on the CPU, where drawing it for the
whole batch (a quarter of whose images get a box in train.py's recipe) cost many times
timm's erasing; on a GPU, and inside ``gpu.sample_seeds`` (each sample's noise from its
own seed), for the whole batch, which needs no wait for the device to know how many
values to draw."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from fastload._checks import check_int, pair
from fastload.boxes import TRIES
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import box_mask
from fastload.seeds import keyed

__all__ = ["RandomErasing"]

MODES = ("const", "rand", "pixel")


class RandomErasing(BatchTransform):
    """Erase 1 to ``max_count`` boxes of each image with probability ``p``, as timm's
    ``RandomErasing`` does in its ``PrefetchLoader`` (on the normalised batch).

    Each image draws its count, then each box up to 10 tries for one that fits: an area
    of ``scale`` times the image's, divided by the count, and an aspect ratio drawn
    log-uniformly in ``[min_aspect, max_aspect]``. ``mode`` fills the box with 0
    (``"const"``), one standard-normal colour per box (``"rand"``) or standard-normal
    noise per pixel (``"pixel"``). The first ``N // num_splits`` images are left alone
    when ``num_splits > 1`` (timm's clean split).

    Args:
        p: Probability of erasing each image.
        scale: The range of the erased area, as a fraction of the image's.
        min_aspect: The smallest aspect ratio; the largest is ``max_aspect`` or its inverse.
        max_aspect: The largest aspect ratio, None for ``1 / min_aspect``.
        mode: ``"const"``, ``"rand"`` or ``"pixel"``.
        min_count: The fewest boxes per erased image.
        max_count: The most boxes per erased image, None for ``min_count``.
        num_splits: Leave the first ``N // num_splits`` images alone, when above 1.
        inplace: Erase the batch given (as timm does) rather than a copy of it.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``mode`` not among the three, a ``scale`` outside [0, 1], an aspect
            that is not positive, counts below 1 or in the wrong order, or ``p`` not a
            probability.

    Example:
        >>> eraser = RandomErasing(p=1.0, mode="const", min_count=2, max_count=2)
        >>> erased = eraser(torch.ones(4, 3, 32, 32))
        >>> bool((erased == 0).any(dim=(1, 2, 3)).all())
        True
    """

    targets = "pass"

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 1 / 3),
        min_aspect: float = 0.3,
        max_aspect: float | None = None,
        mode: str = "const",
        min_count: int = 1,
        max_count: int | None = None,
        num_splits: int = 0,
        *,
        inplace: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, generator=generator)
        self.inplace = bool(inplace)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.scale = pair(scale, "scale")
        if not 0 <= self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must be (min, max) within [0, 1], got {scale!r}")
        max_aspect = 1 / min_aspect if max_aspect is None and min_aspect > 0 else max_aspect
        if min_aspect <= 0 or max_aspect is None or max_aspect < min_aspect:
            raise ValueError(
                f"min_aspect and max_aspect must be positive and in order, got "
                f"{min_aspect!r}, {max_aspect!r}"
            )
        self.aspect = (float(min_aspect), float(max_aspect))
        self.min_count = check_int(min_count, "min_count", low=1)
        self.max_count = check_int(
            min_count if max_count is None else max_count, "max_count", low=self.min_count
        )
        self.num_splits = check_int(num_splits, "num_splits", low=0)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, channels, height, width = shape
        slots = self.max_count
        spread = self.max_count - self.min_count + 1
        counts = self.min_count + self._integers(n, spread, device=device, generator=generator)
        draws = self._rand(n, slots, TRIES, 4, device=device, generator=generator)
        low, high = self.scale
        area = (low + (high - low) * draws[..., 0]) * (height * width) / counts.view(n, 1, 1)
        log_low, log_high = math.log(self.aspect[0]), math.log(self.aspect[1])
        aspect = torch.exp(log_low + (log_high - log_low) * draws[..., 1])
        box_h = torch.round(torch.sqrt(area * aspect))
        box_w = torch.round(torch.sqrt(area / aspect))
        fits = (box_h < height) & (box_w < width)
        first = fits.to(torch.uint8).argmax(dim=-1, keepdim=True)  # the first try that fits

        def at_first(values: Tensor) -> Tensor:
            return values.gather(-1, first).squeeze(-1)

        box_h, box_w = at_first(box_h), at_first(box_w)
        top = torch.floor(at_first(draws[..., 2]) * (height - box_h + 1)).clamp(min=0)
        left = torch.floor(at_first(draws[..., 3]) * (width - box_w + 1)).clamp(min=0)
        start = n // self.num_splits if self.num_splits > 1 else 0
        erased = self._applies(n, device, generator) & (torch.arange(n, device=device) >= start)
        active = (
            fits.any(dim=-1)
            & (torch.arange(slots, device=device) < counts.view(n, 1))
            & erased.view(n, 1)
        )
        params = {"active": active, "top": top, "left": left, "height": box_h, "width": box_w}
        if self.mode == "rand":  # one colour per box
            params["fill"] = self._normal(n, slots, channels, device=device, generator=generator)
        elif self.mode == "pixel" and self._noise_for_boxes_alone(device, generator):
            # one value per channel and pixel of each active box, box after box
            areas = (box_h * box_w)[active]
            params["fill"] = torch.randn(
                int(areas.sum()) * channels, device=device, generator=generator
            )
        elif self.mode == "pixel":
            params["fill"] = self._normal(
                n, channels, height, width, device=device, generator=generator
            )
        return params

    def _noise_for_boxes_alone(
        self, device: torch.device, generator: torch.Generator | None
    ) -> bool:
        """Pixel noise for the boxes alone: on the CPU (counting the erased pixels would
        wait for a GPU) and outside keyed draws (those give each sample a whole image)."""
        return device.type == "cpu" and (generator is not None or not keyed())

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        if images.device.type == "cpu":
            return self._erase_box_by_box(images if self.inplace else images.clone(), params)
        n, size = images.shape[0], (images.shape[-2], images.shape[-1])
        out = images
        for slot in range(self.max_count):  # a loop over boxes, never over samples
            height = torch.where(params["active"][:, slot], params["height"][:, slot], 0)
            mask = box_mask(
                params["top"][:, slot], params["left"][:, slot], height,
                params["width"][:, slot], size,
            )  # fmt: skip
            if self.mode == "const":
                fill = torch.zeros((), dtype=images.dtype, device=images.device)
            elif self.mode == "rand":
                fill = params["fill"][:, slot].view(n, -1, 1, 1).to(images.dtype)
            else:
                fill = params["fill"].to(images.dtype)
            out = torch.where(mask, fill, out)
        return images.copy_(out) if self.inplace else out

    def _erase_box_by_box(self, out: Tensor, params: Params) -> Tensor:
        """Write each active box into ``out`` in place, as timm does: on the CPU a loop
        over the boxes costs less than passes over the whole batch."""
        fill, offset = params.get("fill"), 0
        boxes = params["active"].nonzero().tolist()  # sample-major, slots in order
        sides = {k: params[k][params["active"]].long().tolist()
                 for k in ("top", "left", "height", "width")}  # fmt: skip
        for (sample, slot), top, left, height, width in zip(
            boxes, sides["top"], sides["left"], sides["height"], sides["width"], strict=True
        ):
            region = out[sample, :, top : top + height, left : left + width]
            if fill is None:
                region.zero_()
            elif self.mode == "rand":
                region.copy_(fill[sample, slot].view(-1, 1, 1))
            elif fill.dim() == 1:  # noise drawn for the boxes alone
                size = region.numel()
                region.copy_(fill[offset : offset + size].view_as(region))
                offset += size
            else:
                region.copy_(fill[sample, :, top : top + height, left : left + width])
        return out
