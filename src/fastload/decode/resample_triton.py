"""The fused crop-resize-flip-normalise kernel, in Triton: one launch for the whole batch.

Program ``(n, block)`` writes ``BLOCK`` output pixels of image ``n``, all three channels:
for each, the antialiased bilinear taps of its row and column (at most ``taps_y[n]`` and
``taps_x[n]``, the box's support), read straight from the image's uint8 pixels in one
flat buffer, weighted, normalised, and stored in the output's dtype and strides. Checked
against :func:`fastload.decode.resample.crop_resize_finish_reference` (on the
CPU too, through Triton's interpreter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from fastload.decode.resample import pack_images
from fastload.finishing import Finish

__all__ = ["crop_resize_finish"]

BLOCK = 128


# Triton ships no type information, so triton.jit is an untyped decorator; and Triton reads
# a kernel's parameter annotations itself (tl.constexpr), so its pointers stay unannotated.
@triton.jit  # type: ignore[untyped-decorator]
def _store(  # type: ignore[no-untyped-def]
    target, value, scale, shift, channel, stride_c, mask, TO_UINT8: tl.constexpr
):
    value = value * tl.load(scale + channel) + tl.load(shift + channel)
    if TO_UINT8:
        value = tl.minimum(tl.maximum(tl.floor(value + 0.5), 0.0), 255.0)
    tl.store(target + channel * stride_c, value.to(target.dtype.element_ty), mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def crop_resize_finish_kernel(  # type: ignore[no-untyped-def]
    source, starts, sizes, boxes, taps, flips, scale, shift, out,
    out_h, out_w, stride_n, stride_c, stride_h, stride_w,
    HWC: tl.constexpr, TO_UINT8: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    pixel = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pixel < out_h * out_w
    oy, ox = pixel // out_w, pixel % out_w

    start = tl.load(starts + n)
    height, width = tl.load(sizes + 2 * n), tl.load(sizes + 2 * n + 1)
    top, left = tl.load(boxes + 4 * n), tl.load(boxes + 4 * n + 1)
    box_h, box_w = tl.load(boxes + 4 * n + 2), tl.load(boxes + 4 * n + 3)
    taps_y, taps_x = tl.load(taps + 2 * n), tl.load(taps + 2 * n + 1)
    if tl.load(flips + n) != 0:
        ox = out_w - 1 - ox

    scale_y, scale_x = box_h / out_h, box_w / out_w
    support_y, support_x = tl.maximum(scale_y, 1.0), tl.maximum(scale_x, 1.0)
    low_y = tl.maximum(tl.floor(top), 0.0)
    high_y = tl.minimum(tl.ceil(top + box_h), height.to(tl.float32))
    low_x = tl.maximum(tl.floor(left), 0.0)
    high_x = tl.minimum(tl.ceil(left + box_w), width.to(tl.float32))
    centre_y = top + (oy.to(tl.float32) + 0.5) * scale_y
    centre_x = left + (ox.to(tl.float32) + 0.5) * scale_x
    first_y = tl.maximum(tl.floor(centre_y - support_y + 0.5), low_y)
    last_y = tl.minimum(tl.floor(centre_y + support_y + 0.5), high_y)
    first_x = tl.maximum(tl.floor(centre_x - support_x + 0.5), low_x)
    last_x = tl.minimum(tl.floor(centre_x + support_x + 0.5), high_x)

    total_y = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(taps_y):
        row = first_y + k
        weight = tl.maximum(1.0 - tl.abs((row - centre_y + 0.5) / support_y), 0.0)
        total_y += tl.where(row < last_y, weight, 0.0)
    total_x = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(taps_x):
        column = first_x + k
        weight = tl.maximum(1.0 - tl.abs((column - centre_x + 0.5) / support_x), 0.0)
        total_x += tl.where(column < last_x, weight, 0.0)

    # where channel c of pixel (row, column) is: planes (CHW) or interleaved (HWC)
    if HWC:
        pixel_step, channel_step = 3, 1
    else:
        pixel_step, channel_step = 1, height.to(tl.int64) * width
    red = tl.zeros((BLOCK,), dtype=tl.float32)
    green = tl.zeros((BLOCK,), dtype=tl.float32)
    blue = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(taps_y):
        row = first_y + i
        weight_y = tl.maximum(1.0 - tl.abs((row - centre_y + 0.5) / support_y), 0.0)
        row_ok = inside & (row < last_y)
        for j in range(taps_x):
            column = first_x + j
            weight_x = tl.maximum(1.0 - tl.abs((column - centre_x + 0.5) / support_x), 0.0)
            ok = row_ok & (column < last_x)
            weight = tl.where(ok, weight_y * weight_x, 0.0)
            at = start + (row.to(tl.int64) * width + column.to(tl.int64)) * pixel_step
            red += weight * tl.load(source + at, mask=ok, other=0).to(tl.float32)
            green += weight * tl.load(source + channel_step + at, mask=ok, other=0).to(tl.float32)
            blue += weight * tl.load(source + 2 * channel_step + at, mask=ok, other=0).to(
                tl.float32
            )

    norm = 1.0 / (total_y * total_x)
    target = out + n * stride_n + (pixel // out_w) * stride_h + (pixel % out_w) * stride_w
    _store(target, red * norm, scale, shift, 0, stride_c, inside, TO_UINT8)
    _store(target, green * norm, scale, shift, 1, stride_c, inside, TO_UINT8)
    _store(target, blue * norm, scale, shift, 2, stride_c, inside, TO_UINT8)


def _taps(length: Tensor, size: int) -> Tensor:
    """An upper bound on the taps any output pixel of each box reads along one axis."""
    support = torch.clamp(length / size, min=1.0)
    return (2 * torch.ceil(support) + 2).to(torch.int32)


def crop_resize_finish(
    images: Sequence[Tensor],
    boxes: Tensor,
    size: tuple[int, int],
    flip: Tensor,
    finish: Finish,
    *,
    hwc: bool = False,
) -> Tensor:
    """The batch in one launch (see the module's description)."""
    device = images[0].device if len(images) else boxes.device
    out = finish.empty(len(images), size, device)
    if not len(images):
        return out
    flat, starts, sizes = pack_images(images, hwc=hwc)
    boxes = boxes.to(torch.float32).cpu()
    taps = torch.stack([_taps(boxes[:, 2], size[0]), _taps(boxes[:, 3], size[1])], dim=1)

    def to_device(values: Any, dtype: torch.dtype) -> Tensor:
        return torch.as_tensor(values, dtype=dtype).to(device, non_blocking=True)

    grid = (len(images), math.ceil(size[0] * size[1] / BLOCK))
    crop_resize_finish_kernel[grid](
        flat, to_device(starts, torch.int64), to_device(sizes, torch.int32),
        to_device(boxes, torch.float32), to_device(taps, torch.int32),
        to_device(flip.to(torch.int32).cpu(), torch.int32),
        to_device(finish.scale, torch.float32), to_device(finish.shift, torch.float32),
        out, size[0], size[1], *out.stride(),
        HWC=hwc, TO_UINT8=finish.dtype == torch.uint8, BLOCK=triton.next_power_of_2(BLOCK),
    )  # fmt: skip
    return out
