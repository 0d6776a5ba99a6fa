"""Decoded images of any sizes to one finished batch in one pass: each sample's crop box
resampled (antialiased where it shrinks, as torchvision's resized crop), flipped,
normalised, cast and laid out, with no float canvas and no launch per image on a GPU.

:func:`crop_resize_finish` runs the fused Triton kernel
(:mod:`~fastload.decode.resample_triton`) on CUDA where Triton is installed, and the same
maths in plain torch (:mod:`~fastload.decode.resample`) everywhere else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from torch import Tensor

from fastload.decode.orientation import orient
from fastload.decode.resample import crop_resize_finish_reference
from fastload.finishing import Finish

__all__ = ["crop_resize_finish"]


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
    """:func:`crop_resize_finish_reference`'s result; on CUDA with Triton, from one fused
    kernel for the whole batch. ``hwc``: the images are (H, W, 3), as decoders give
    them. ``sizes``: the (N, 2) heights and widths the boxes were drawn for; an image of
    another size is refused by index. ``orientations``: each CHW image's EXIF orientation
    (1 to 8), for images as stored (nvJPEG's): the boxes are in the shown image, which
    the fused kernel reads without a copy.

    Raises:
        ValueError: Not one box (N, 4) and one flip per image; an image of another size
            than ``sizes`` says; on CUDA, an image that is not a uint8 3-channel image on
            the first one's device.

    Example:
        >>> import torch
        >>> image = torch.arange(48, dtype=torch.uint8).view(1, 4, 12).expand(3, 4, 12)
        >>> boxes = torch.tensor([[0.0, 0.0, 4.0, 12.0]])
        >>> out = crop_resize_finish([image], boxes, (2, 3), torch.tensor([False]), Finish())
        >>> out[0, 0].tolist()
        [[10, 14, 18], [29, 33, 37]]
    """
    if orientations is not None and hwc:
        raise ValueError("orientations are for CHW images as stored (nvJPEG's), not HWC ones")
    if len(images) and images[0].device.type == "cuda":
        fused = _fused()
        if fused is not None:
            return fused(
                images, boxes, size, flip, finish,
                hwc=hwc, sizes=sizes, orientations=orientations,
            )  # fmt: skip
    if orientations is not None:
        images = [orient(image, int(o)) for image, o in zip(images, orientations, strict=True)]
    return crop_resize_finish_reference(images, boxes, size, flip, finish, hwc=hwc, sizes=sizes)


@functools.cache
def _fused() -> Callable[..., Tensor] | None:
    """The Triton kernel's entry point, or None where Triton does not import (it ships
    with torch's CUDA wheels on Linux)."""
    try:
        from fastload.decode.resample_triton import crop_resize_finish as fused
    except ImportError:
        return None
    return fused
