"""torchvision's random box draw (``RandomResizedCrop``'s and ``RandomErasing``'s): up to
ten tries of an area and a log-uniform aspect ratio, the first box that fits wins.

One rule, two forms that give the same boxes for the same uniforms: :func:`sample_boxes`
draws a whole batch at once with tensors (the GPU modules, GPUDecoder), and
:func:`sample_box` one image in plain Python (the CPU transform, per sample in a
worker). Each try takes four uniforms in [0, 1): area, aspect, top, left. The maths is
in float64 in both, so that they agree to the last pixel.

With ``erasing=False`` (a crop), a box fits when it lies within the image, and when no
try fits the box is the whole image with its aspect ratio clamped to ``ratio``,
centred. With ``erasing=True``, the first side is the height, a box fits when it is
smaller than the image on both sides, and when no try fits the box is the whole image
and ``found`` is false (nothing is erased).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["TRIES", "Boxes", "crop_boxes", "sample_box", "sample_boxes"]

#: torchvision's number of tries.
TRIES = 10


class Boxes(NamedTuple):
    """Per sample (N,): float32 ``top``, ``left``, ``height``, ``width`` (whole pixels)
    and whether a try fitted (``found``)."""

    top: Tensor
    left: Tensor
    height: Tensor
    width: Tensor
    found: Tensor


def sample_boxes(
    height: Tensor,
    width: Tensor,
    uniforms: Tensor,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    *,
    erasing: bool = False,
) -> Boxes:
    """The boxes of images of ``height`` and ``width`` (N,) from ``uniforms`` (N, 10, 4),
    all at once (see the module's description)."""
    image_h = height.to(torch.float64).view(-1, 1)
    image_w = width.to(torch.float64).view(-1, 1)
    draws = uniforms.to(torch.float64)
    area = image_h * image_w * (scale[0] + (scale[1] - scale[0]) * draws[..., 0])
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(log_low + (log_high - log_low) * draws[..., 1])
    long = torch.sqrt(area * aspect).round()
    short = torch.sqrt(area / aspect).round()
    if erasing:
        box_h, box_w = long, short
        fits = (box_h < image_h) & (box_w < image_w)
    else:
        box_w, box_h = long, short
        fits = (box_w > 0) & (box_w <= image_w) & (box_h > 0) & (box_h <= image_h)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # the first try that fits
    box_h, box_w, top_draw, left_draw = (
        values.gather(1, first).squeeze(1)
        for values in (box_h, box_w, draws[..., 2], draws[..., 3])
    )
    image_h, image_w = image_h.squeeze(1), image_w.squeeze(1)
    top = torch.minimum((top_draw * (image_h - box_h + 1)).floor(), image_h - box_h)
    left = torch.minimum((left_draw * (image_w - box_w + 1)).floor(), image_w - box_w)
    found = fits.any(dim=1)
    if erasing:  # torchvision's "no box": the whole image, left unchanged
        zero = torch.zeros_like(top)
        fallback = (zero, zero, image_h, image_w)
    else:  # the whole image, its aspect ratio clamped to ``ratio``, centred
        in_ratio = image_w / image_h
        fallback_h = torch.where(in_ratio < ratio[0], (image_w / ratio[0]).round(), image_h)
        fallback_w = torch.where(in_ratio > ratio[1], (image_h * ratio[1]).round(), image_w)
        fallback = (
            ((image_h - fallback_h) / 2).floor(),
            ((image_w - fallback_w) / 2).floor(),
            fallback_h,
            fallback_w,
        )
    top, left, box_h, box_w = (
        torch.where(found, value, other).to(torch.float32)
        for value, other in zip((top, left, box_h, box_w), fallback, strict=True)
    )
    return Boxes(top, left, box_h, box_w, found)


def sample_box(
    height: int,
    width: int,
    tries: Iterable[Sequence[float]],
    scale: tuple[float, float],
    ratio: tuple[float, float],
    *,
    erasing: bool = False,
) -> tuple[int, int, int, int, bool]:
    """``(top, left, box_height, box_width, found)`` of one image from up to ten ``tries``
    of four uniforms each, read one try at a time (a generator draws only what is used);
    the same box as :func:`sample_boxes` for the same uniforms."""
    area, log_low, log_high = height * width, math.log(ratio[0]), math.log(ratio[1])
    for u_area, u_aspect, u_top, u_left in itertools.islice(tries, TRIES):
        target = area * (scale[0] + (scale[1] - scale[0]) * u_area)
        aspect = math.exp(log_low + (log_high - log_low) * u_aspect)
        long, short = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if erasing:
            box_h, box_w = long, short
            fits = box_h < height and box_w < width
        else:
            box_w, box_h = long, short
            fits = 0 < box_w <= width and 0 < box_h <= height
        if fits:
            top = min(math.floor(u_top * (height - box_h + 1)), height - box_h)
            left = min(math.floor(u_left * (width - box_w + 1)), width - box_w)
            return top, left, box_h, box_w, True
    if erasing:
        return 0, 0, height, width, False
    in_ratio = width / height
    box_h = round(width / ratio[0]) if in_ratio < ratio[0] else height
    box_w = round(height * ratio[1]) if in_ratio > ratio[1] else width
    return (height - box_h) // 2, (width - box_w) // 2, box_h, box_w, False


def crop_boxes(
    sizes: Tensor,
    crop: str,
    size: tuple[int, int],
    *,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    crop_fraction: float,
    uniforms: Tensor | None = None,
) -> dict[str, Tensor]:
    """Each image's box (``top``, ``left``, ``height``, ``width``, (N,) each) for images of
    ``sizes`` ((N, 2) heights and widths) and an output of ``size``: ``"random"``, a
    RandomResizedCrop from ``uniforms`` ((N, TRIES, 4) draws in [0, 1)); ``"resize"``, the
    whole image; ``"center"``, the region ``Resize(size / crop_fraction)`` +
    ``CenterCrop(size)`` keeps.

    Example:
        >>> boxes = crop_boxes(torch.tensor([[100.0, 200.0]]), "center", (50, 50),
        ...                    scale=(0.08, 1.0), ratio=(0.75, 1.33), crop_fraction=0.5)
        >>> [round(float(boxes[key][0]), 1) for key in ("top", "left", "height", "width")]
        [25.0, 75.0, 50.0, 50.0]
    """
    height, width = sizes[:, 0], sizes[:, 1]
    if crop == "random":
        if uniforms is None:
            raise ValueError("a random crop's boxes need their uniforms")
        boxes = sample_boxes(height, width, uniforms, scale, ratio)
        return {"top": boxes.top, "left": boxes.left, "height": boxes.height,
                "width": boxes.width}  # fmt: skip
    if crop == "resize":
        zero = torch.zeros_like(height)
        return {"top": zero, "left": zero, "height": height, "width": width}
    out_h, out_w = size
    factor = (min(out_h, out_w) / crop_fraction) / torch.minimum(height, width)
    box_h, box_w = out_h / factor, out_w / factor
    return {"top": (height - box_h) / 2, "left": (width - box_w) / 2, "height": box_h,
            "width": box_w}  # fmt: skip
