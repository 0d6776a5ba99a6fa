"""The fused crop-resize-flip-normalise kernel, in Triton: one launch for the whole batch.

Program ``(n, block)`` writes ``BLOCK`` output pixels of image ``n``, all three channels:
for each, the antialiased bilinear taps of its row and column (at most the box's support),
read straight from the decoder's own uint8 image wherever it lies, weighted, normalised,
and stored in the output's dtype and strides. The images are not gathered into one
buffer first: a table gives each one's address, size and strides (CHW, HWC, pitched or
transposed views alike, an image as stored shown as its EXIF orientation says), and the
kernel reads through it. Checked against
:func:`fastload.decode.resample.crop_resize_finish_reference` (on the CPU too, through
Triton's interpreter).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Sequence
from typing import NoReturn

import numpy as np
import torch
import triton
import triton.language as tl
from torch import Tensor

from fastload.decode.orientation import shown_steps
from fastload.decode.resample import check_batch, check_sizes
from fastload.finishing import Finish

__all__ = ["crop_resize_finish", "image_table"]

BLOCK = 128
# Each image's row of the table the kernel reads (int64): where its pixels are, its
# (height, width), its strides in elements, the taps its box needs along each axis, and
# whether it is mirrored.
COLUMNS = ("address", "height", "width", "step_c", "step_y", "step_x", "taps_y", "taps_x", "flip")


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
    table, boxes, scale, shift, out,
    out_h, out_w, stride_n, stride_c, stride_h, stride_w,
    TO_UINT8: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    pixel = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pixel < out_h * out_w
    oy, ox = pixel // out_w, pixel % out_w

    row_of_n = table + 9 * n  # the columns of COLUMNS, in order
    source = tl.load(row_of_n).to(tl.pointer_type(tl.uint8))
    height, width = tl.load(row_of_n + 1), tl.load(row_of_n + 2)
    step_c, step_y, step_x = tl.load(row_of_n + 3), tl.load(row_of_n + 4), tl.load(row_of_n + 5)
    taps_y, taps_x = tl.load(row_of_n + 6).to(tl.int32), tl.load(row_of_n + 7).to(tl.int32)
    if tl.load(row_of_n + 8) != 0:
        ox = out_w - 1 - ox
    top, left = tl.load(boxes + 4 * n), tl.load(boxes + 4 * n + 1)
    box_h, box_w = tl.load(boxes + 4 * n + 2), tl.load(boxes + 4 * n + 3)

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
            at = source + row.to(tl.int64) * step_y + column.to(tl.int64) * step_x
            red += weight * tl.load(at, mask=ok, other=0).to(tl.float32)
            green += weight * tl.load(at + step_c, mask=ok, other=0).to(tl.float32)
            blue += weight * tl.load(at + 2 * step_c, mask=ok, other=0).to(tl.float32)

    norm = 1.0 / (total_y * total_x)
    target = (
        out + n.to(tl.int64) * stride_n + (pixel // out_w) * stride_h + (pixel % out_w) * stride_w
    )
    _store(target, red * norm, scale, shift, 0, stride_c, inside, TO_UINT8)
    _store(target, green * norm, scale, shift, 1, stride_c, inside, TO_UINT8)
    _store(target, blue * norm, scale, shift, 2, stride_c, inside, TO_UINT8)


def _taps(length: np.ndarray, size: int) -> np.ndarray:
    """An upper bound on the taps any output pixel of each box reads along one axis."""
    return 2 * np.ceil(np.maximum(length / size, 1.0)).astype(np.int64) + 2


def image_table(
    images: Sequence[Tensor],
    boxes: Tensor,
    size: tuple[int, int],
    flip: Tensor,
    device: torch.device,
    *,
    hwc: bool = False,
    sizes: np.ndarray | None = None,
    orientations: np.ndarray | None = None,
) -> Tensor:
    """The kernel's (N, 9) int64 table of ``images`` (CHW uint8, or HWC, on ``device``,
    any strides), one row per image in :data:`COLUMNS`' order; ``boxes`` and ``flip``
    on the CPU. The kernel reads each image through its row alone, so each must be what
    the row says: checked here, and ``sizes`` too (see
    :func:`~fastload.decode.resample.check_sizes`). With ``orientations`` (EXIF, 1 to 8)
    each row describes the image as shown, read from the stored one without a copy.

    Example:
        >>> image = torch.zeros(3, 4, 5, dtype=torch.uint8)
        >>> boxes = torch.tensor([[0.0, 0.0, 4.0, 5.0]])
        >>> table = image_table([image], boxes, (2, 2), torch.tensor([True]), image.device)
        >>> table[0, 1:].tolist()  # height, width, strides, taps, flip
        [4, 5, 20, 5, 1, 6, 8, 1]
    """
    channel, row, column = (2, 0, 1) if hwc else (0, 1, 2)
    # the one Python pass over the batch's images (a batch has hundreds); the checks then
    # look at the whole batch at once, and name an image only when one fails
    described = [(image.data_ptr(), *image.shape, *image.stride()) for image in images]
    kinds = {(image.dtype, image.device) for image in images}
    if set(map(len, described)) != {7} or kinds != {(torch.uint8, device)}:
        _refuse_the_first_unreadable(images, device, hwc)
    found = np.fromiter(itertools.chain.from_iterable(described), np.int64, 7 * len(images))
    found = found.reshape(-1, 7)
    if (found[:, 1 + channel] != 3).any():
        _refuse_the_first_unreadable(images, device, hwc)
    table = np.empty((len(images), len(COLUMNS)), np.int64)
    table[:, :6] = found[:, [0, 1 + row, 1 + column, 4 + channel, 4 + row, 4 + column]]
    if orientations is not None and (np.asarray(orientations) != 1).any():
        offsets, table[:, 1], table[:, 2], table[:, 4], table[:, 5] = shown_steps(
            np.asarray(orientations), table[:, 1], table[:, 2], table[:, 4], table[:, 5]
        )
        table[:, 0] += offsets
    if sizes is not None:
        check_sizes(table[:, 1:3], sizes)
    lengths = boxes.numpy()
    table[:, 6], table[:, 7] = _taps(lengths[:, 2], size[0]), _taps(lengths[:, 3], size[1])
    table[:, 8] = flip.numpy()
    return torch.from_numpy(table)


def _refuse_the_first_unreadable(
    images: Sequence[Tensor], device: torch.device, hwc: bool
) -> NoReturn:
    """Raise for the first of ``images`` that is not a uint8 CHW (HWC) image on ``device``."""
    layout, channel = ("(H, W, 3)", 2) if hwc else ("(3, H, W)", 0)
    for index, image in enumerate(images):
        if image.dim() != 3 or image.shape[channel] != 3 or image.dtype != torch.uint8:
            raise ValueError(
                f"image {index}: a uint8 {layout} image expected, got {image.dtype} "
                f"{tuple(image.shape)}"
            )
        if image.device != device:
            raise ValueError(f"image {index} is on {image.device}, the batch on {device}")
    raise AssertionError("the batch's check and the images' disagree")  # not reached


def crop_resize_finish(
    images: Sequence[Tensor],
    boxes: Tensor,
    size: tuple[int, int],
    flip: Tensor,
    finish: Finish,
    *,
    hwc: bool = False,
    sizes: np.ndarray | None = None,
    orientations: np.ndarray | None = None,
) -> Tensor:
    """The batch in one launch (see the module's description); on the images' device,
    whichever is current."""
    device = images[0].device if len(images) else boxes.device
    out = finish.empty(len(images), size, device)
    if not len(images):
        return out
    check_batch(len(images), boxes, flip)  # the kernel reads a box per image
    boxes, flip = boxes.to(torch.float32).cpu(), flip.cpu()
    table = image_table(
        images, boxes, size, flip, device, hwc=hwc, sizes=sizes, orientations=orientations
    )
    # two copies to the device: the table, and every float the kernel reads
    values = np.concatenate([boxes.numpy().reshape(-1), finish.scale, finish.shift])
    table = table.to(device, non_blocking=True)
    floats = torch.from_numpy(values.astype(np.float32)).to(device, non_blocking=True)
    count = boxes.numel()
    grid = (len(images), math.ceil(size[0] * size[1] / BLOCK))
    # Triton launches on the current device: the images' own, or it reads their addresses
    # from another GPU
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        crop_resize_finish_kernel[grid](
            table, floats[:count], floats[count : count + 3], floats[count + 3 :],
            out, size[0], size[1], *out.stride(),
            TO_UINT8=finish.dtype == torch.uint8, BLOCK=triton.next_power_of_2(BLOCK),
        )  # fmt: skip
    return out
