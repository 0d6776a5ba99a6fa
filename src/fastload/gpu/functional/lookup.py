"""Per-pixel operations on uint8 images on a CPU through a lookup table per sample.

An operation whose output value depends only on the input value and its sample's
parameters (brightness, contrast against a sample's mean, solarizing) is, for uint8, a
table of 256 entries per sample: the operation's own arithmetic on the values 0 to 255
gives the table, and OpenCV's ``LUT`` applies it, the whole image in one pass of byte
lookups, where the arithmetic would convert every pixel to float32 and back. The result
is the same, bit for bit: the same operations on the same values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, cast

import cv2
import torch
from torch import Tensor

__all__ = ["MIN_ELEMENTS", "per_pixel", "through_tables"]

P = ParamSpec("P")

_VALUES = 256
#: The smallest sample a table is made for: below it the arithmetic on the whole batch,
#: in the cache, costs less than a lookup call a sample.
MIN_ELEMENTS = 1024


def per_pixel(
    operation: Callable[Concatenate[Tensor, P], Tensor],
) -> Callable[Concatenate[Tensor, P], Tensor]:
    """Mark ``operation(images, *args)`` as per pixel: each output value a function of its
    input value and of ``args`` broadcast per sample (shaped (N,) or (N, 1, 1, 1)). On
    uint8 (N, C, H, W) images on a CPU it then runs through :func:`through_tables`;
    elsewhere as it is."""

    def dispatch(images: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if not _tables_pay(images):
            return operation(images, *args, **kwargs)
        return through_tables(images, lambda values: operation(values, *args, **kwargs))

    functools.update_wrapper(dispatch, operation)  # its name, its docs, ``__wrapped__``
    return cast(Callable[Concatenate[Tensor, P], Tensor], dispatch)


def _tables_pay(images: Tensor) -> bool:
    return (
        images.device.type == "cpu"
        and images.dtype == torch.uint8
        and images.dim() == 4
        and len(images) > 0
        and math.prod(images.shape[1:]) >= MIN_ELEMENTS
    )


def through_tables(images: Tensor, point: Callable[[Tensor], Tensor]) -> Tensor:
    """``point(images)`` for a per-pixel ``point`` on uint8 (N, C, H, W) CPU images: each
    sample's table is ``point`` of the values 0 to 255 (given as (N, 1, 1, 256)), applied
    with OpenCV's ``LUT``. The output is laid out as the input is (channels last stays
    so); other strides become contiguous."""
    n = len(images)
    values = torch.arange(_VALUES, dtype=torch.uint8).repeat(n, 1, 1, 1)
    tables = point(values).reshape(n, _VALUES).contiguous()
    channels_last = images.is_contiguous(memory_format=torch.channels_last)
    if channels_last and not images.is_contiguous():
        source = images
        dense = source.permute(0, 2, 3, 1)  # NHWC: each sample one block of memory
    else:
        source = images.contiguous()
        dense = source
    out = torch.empty_like(source)
    written = out.permute(0, 2, 3, 1) if dense is not source else out
    # 2-D views of each sample's block (OpenCV reads a 3-D array as pixels of channels),
    # made by NumPy: a view a sample, cheaper there than torch's
    rows = (n, -1, dense.shape[-1])
    pixels, results = dense.numpy().reshape(rows), written.numpy().reshape(rows)
    lookups = tables.numpy()
    for sample in range(n):
        cv2.LUT(pixels[sample], lookups[sample], dst=results[sample])
    return out
