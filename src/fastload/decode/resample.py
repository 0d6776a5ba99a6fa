"""The plain-torch crop + resize + flip + finish of decoded images of any sizes, image by
image: the CPU path of :func:`fastload.decode.crop.crop_resize_finish`, and what the
fused Triton kernel is checked against. The weights are torch's antialiased bilinear ones
(``_upsample_bilinear2d_aa``, PIL's): a triangle filter whose support grows with the
shrink factor, the taps clipped to the box and normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from fastload.finishing import Finish

__all__ = [
    "axis_weights",
    "check_batch",
    "check_sizes",
    "crop_resize_finish_reference",
    "image_size",
]


def axis_weights(start: float, length: float, limit: int, size: int) -> tuple[Tensor, int]:
    """Weights that resample ``start .. start + length`` of an axis of ``limit`` pixels to
    ``size``: torch's antialiased bilinear, taps within the box. Returns the (size, taps)
    float32 weights and the pixel the first tap reads (taps outside the box are never
    read, so they are not there)."""
    scale = length / size
    support = max(scale, 1.0)
    low, high = max(int(start // 1), 0), min(int(-(-(start + length) // 1)), limit)
    centres = start + (torch.arange(size, dtype=torch.float32) + 0.5) * scale
    taps = torch.arange(low, high, dtype=torch.float32)
    weights = (1 - ((taps - centres[:, None] + 0.5) / support).abs()).clamp_(min=0)
    first = torch.floor(centres - support + 0.5)[:, None]
    last = torch.floor(centres + support + 0.5)[:, None]
    weights = torch.where((taps >= first) & (taps < last), weights, 0)
    return weights / weights.sum(dim=1, keepdim=True), low


def check_batch(count: int, boxes: Tensor, flip: Tensor) -> None:
    """One box (top, left, height, width) and one flip per image, for ``count`` images."""
    if tuple(boxes.shape) != (count, 4):
        raise ValueError(f"boxes: ({count}, 4) for {count} images, got {tuple(boxes.shape)}")
    if flip.numel() != count:
        raise ValueError(f"flip: {count} values for {count} images, got {flip.numel()}")


def check_sizes(found: np.ndarray, expected: np.ndarray) -> None:
    """Each image's (height, width) in ``found`` is the one its box was drawn for
    (``expected``, (N, 2))."""
    wrong = np.flatnonzero((found != np.asarray(expected)).any(axis=1))
    if wrong.size:
        index = int(wrong[0])
        raise ValueError(
            f"image {index} of the batch is {tuple(found[index].tolist())} (height, width), "
            f"its box was drawn for {tuple(np.asarray(expected)[index].tolist())}"
        )


def image_size(image: Tensor, hwc: bool) -> tuple[int, int]:
    """``(height, width)`` of a CHW image, or of an HWC one."""
    return (image.shape[0], image.shape[1]) if hwc else (image.shape[-2], image.shape[-1])


def crop_resize_finish_reference(
    images: Sequence[Tensor],
    boxes: Tensor,
    size: tuple[int, int],
    flip: Tensor,
    finish: Finish,
    *,
    hwc: bool = False,
    sizes: np.ndarray | None = None,
) -> Tensor:
    """The plain-torch pass: for image ``i`` (CHW uint8, or HWC with ``hwc``), its box
    ``boxes[i]`` (top, left, height, width; floats allowed) resampled to ``size``,
    mirrored where ``flip[i]``, finished. The CPU path, and what the fused kernel is
    checked against. ``sizes``: see :func:`check_sizes`."""
    check_batch(len(images), boxes, flip)
    if sizes is not None:
        check_sizes(np.array([image_size(image, hwc) for image in images]).reshape(-1, 2), sizes)
    device = images[0].device if len(images) else boxes.device
    # the resampled values of the batch, finished once (one statistics copy, one cast)
    pixels = torch.empty((len(images), 3, *size), dtype=torch.float32, device=device)
    for index, image in enumerate(images):
        top, left, height, width = (float(v) for v in boxes[index])
        image_h, image_w = image_size(image, hwc)
        rows, y0 = axis_weights(top, height, image_h, size[0])
        columns, x0 = axis_weights(left, width, image_w, size[1])
        rows, columns = rows.to(device), columns.to(device)
        if bool(flip[index]):
            columns = columns.flip(0)
        y1, x1 = y0 + rows.shape[1], x0 + columns.shape[1]
        if hwc:  # (h, w, 3): rows over h as one matmul, then columns over w
            region = image[y0:y1, x0:x1].to(torch.float32)
            tall = (rows @ region.reshape(region.shape[0], -1)).view(size[0], -1, 3)
            pixels[index] = torch.einsum("xw,ywc->cyx", columns, tall)
        else:
            region = image[:, y0:y1, x0:x1].to(torch.float32)
            pixels[index] = rows @ region @ columns.T
    return finish.empty(len(images), size, device).copy_(finish.apply(pixels))
