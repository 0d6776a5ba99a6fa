"""torchvision's random box draw (``RandomResizedCrop``'s and ``RandomErasing``'s): up to
ten tries of an area and a log-uniform aspect ratio, the first box that fits wins.

One rule, two forms that give the same boxes for the same uniforms: :func:`sample_boxes`
draws a whole batch at once with tensors (the GPU modules) or NumPy arrays (GPUDecoder,
on the host), and
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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import torch
from torch import Tensor

__all__ = ["TRIES", "Boxes", "crop_boxes", "sample_box", "sample_boxes"]

#: torchvision's number of tries.
TRIES = 10

Array = TypeVar("Array", Tensor, np.ndarray)


class Boxes(NamedTuple, Generic[Array]):
    """Per sample (N,): float32 ``top``, ``left``, ``height``, ``width`` (whole pixels)
    and whether a try fitted (``found``); tensors or NumPy arrays."""

    top: Array
    left: Array
    height: Array
    width: Array
    found: Array


def sample_boxes(
    height: Array,
    width: Array,
    uniforms: Array,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    *,
    erasing: bool = False,
) -> Boxes[Array]:
    """The boxes of images of ``height`` and ``width`` (N,) from ``uniforms`` (N, 10, 4),
    all at once (see the module's description): tensors on any device, or NumPy arrays
    (the same maths, a fraction of torch's cost per operation on a batch's few values on
    the host) giving NumPy boxes."""
    xp: Any = np if isinstance(uniforms, np.ndarray) else torch
    cast: Callable[[Any, Any], Any]
    take: Callable[[Any, Any, int], Any]
    if xp is np:
        cast, take = (lambda a, dtype: a.astype(dtype)), np.take_along_axis
    else:  # torch's own calls: its asarray and take_along_dim cost more on small tensors
        cast, take = (lambda a, dtype: a.to(dtype)), (lambda a, index, dim: a.gather(dim, index))
    image_h = cast(height, xp.float64).reshape(-1, 1)
    image_w = cast(width, xp.float64).reshape(-1, 1)
    draws = cast(uniforms, xp.float64)
    area = image_h * image_w * (scale[0] + (scale[1] - scale[0]) * draws[..., 0])
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    aspect = xp.exp(log_low + (log_high - log_low) * draws[..., 1])
    long = xp.round(xp.sqrt(area * aspect))
    short = xp.round(xp.sqrt(area / aspect))
    if erasing:
        box_h, box_w = long, short
        fits = (box_h < image_h) & (box_w < image_w)
    else:
        box_w, box_h = long, short
        fits = (box_w > 0) & (box_w <= image_w) & (box_h > 0) & (box_h <= image_h)
    first = cast(fits, xp.uint8).argmax(axis=1, keepdims=True)  # the first try that fits
    box_h, box_w, top_draw, left_draw = (
        take(values, first, 1)[:, 0] for values in (box_h, box_w, draws[..., 2], draws[..., 3])
    )
    image_h, image_w = image_h[:, 0], image_w[:, 0]
    top = xp.minimum(xp.floor(top_draw * (image_h - box_h + 1)), image_h - box_h)
    left = xp.minimum(xp.floor(left_draw * (image_w - box_w + 1)), image_w - box_w)
    found = fits.any(axis=1)
    if erasing:  # torchvision's "no box": the whole image, left unchanged
        zero = xp.zeros_like(top)
        fallback = (zero, zero, image_h, image_w)
    else:  # the whole image, its aspect ratio clamped to ``ratio``, centred
        in_ratio = image_w / image_h
        fallback_h = xp.where(in_ratio < ratio[0], xp.round(image_w / ratio[0]), image_h)
        fallback_w = xp.where(in_ratio > ratio[1], xp.round(image_h * ratio[1]), image_w)
        fallback = (
            xp.floor((image_h - fallback_h) / 2),
            xp.floor((image_w - fallback_w) / 2),
            fallback_h,
            fallback_w,
        )
    top, left, box_h, box_w = (
        cast(xp.where(found, value, other), xp.float32)
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
    sizes: Array,
    crop: str,
    size: tuple[int, int],
    *,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    crop_fraction: float,
    uniforms: Array | None = None,
) -> dict[str, Array]:
    """Each image's box (``top``, ``left``, ``height``, ``width``, (N,) each) for images of
    ``sizes`` ((N, 2) heights and widths) and an output of ``size``: ``"random"``, a
    RandomResizedCrop from ``uniforms`` ((N, TRIES, 4) draws in [0, 1)); ``"resize"``, the
    whole image; ``"center"``, the region ``Resize(size / crop_fraction)`` +
    ``CenterCrop(size)`` keeps. Tensors, or NumPy arrays (as :func:`sample_boxes`; a
    centre box, fractional, may differ from torch's in the last bit of its float32).

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
    xp: Any = np if isinstance(sizes, np.ndarray) else torch
    if crop == "resize":
        zero = xp.zeros_like(height)
        return {"top": zero, "left": zero, "height": height, "width": width}
    out_h, out_w = size
    factor = (min(out_h, out_w) / crop_fraction) / xp.minimum(height, width)
    box_h, box_w = out_h / factor, out_w / factor
    return {"top": (height - box_h) / 2, "left": (width - box_w) / 2, "height": box_h,
            "width": box_w}  # fmt: skip
