"""Decoded images of any sizes to one finished batch in one pass: each sample's crop box
resampled (antialiased where it shrinks, as torchvision's resized crop), flipped,
normalised, cast and laid out, with no float canvas and no launch per image on a GPU.

:func:`crop_resize_finish` runs the fused Triton kernel on CUDA where Triton is
installed and :func:`crop_resize_finish_reference`, the same maths in plain torch, image
by image, everywhere else. The weights are torch's antialiased bilinear ones
(``_upsample_bilinear2d_aa``, PIL's): a triangle filter whose support grows with the
shrink factor, the taps clipped to the box and normalised.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "Finish",
    "axis_weights",
    "crop_resize_finish",
    "crop_resize_finish_reference",
    "pack_images",
]


class Finish:
    """What happens to the resampled pixels (0..255): ``value * scale[c] + shift[c]``,
    then ``dtype`` (uint8 is rounded and clamped), in ``channels_last`` or not.

    ``Finish.normalized(mean, std, dtype)`` is torchvision's ``ToDtype(scale=True)`` then
    ``Normalize(mean, std)``; ``Finish()`` keeps uint8.
    """

    def __init__(
        self,
        scale: Sequence[float] = (1.0, 1.0, 1.0),
        shift: Sequence[float] = (0.0, 0.0, 0.0),
        dtype: torch.dtype = torch.uint8,
        channels_last: bool = False,
    ) -> None:
        self.scale, self.shift = tuple(map(float, scale)), tuple(map(float, shift))
        self.dtype, self.channels_last = dtype, channels_last

    @classmethod
    def normalized(
        cls,
        mean: Sequence[float] | None,
        std: Sequence[float] | None,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
    ) -> Finish:
        """0..1 floats (``mean``/``std`` None), or normalised ones: statistics on the 0..1
        scale or on the 0..255 one, as ``DataPrefetcher`` takes them."""
        if mean is None or std is None:
            return cls((1 / 255,) * 3, (0.0,) * 3, dtype, channels_last)
        from fastload.gpu.color import Normalize  # the package's one reading of statistics

        scale, shift = Normalize.from_statistics(mean, std).affine(
            torch.device("cpu"), torch.float32, uint8=True
        )
        if scale.numel() != 3:
            raise ValueError(f"mean and std need 3 values (RGB), got {scale.numel()}")
        return cls(scale.flatten().tolist(), shift.flatten().tolist(), dtype, channels_last)

    def empty(self, n: int, size: tuple[int, int], device: torch.device) -> Tensor:
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        return torch.empty((n, 3, *size), dtype=self.dtype, device=device, memory_format=layout)

    def apply(self, pixels: Tensor) -> Tensor:
        """``pixels`` (float32, 0..255, (..., 3, H, W)) finished, in place where it can."""
        scale = torch.tensor(self.scale, device=pixels.device).view(3, 1, 1)
        shift = torch.tensor(self.shift, device=pixels.device).view(3, 1, 1)
        pixels = pixels.mul_(scale).add_(shift)
        if self.dtype == torch.uint8:
            return pixels.round_().clamp_(0, 255).to(torch.uint8)
        return pixels.to(self.dtype)


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
) -> Tensor:
    """The plain-torch pass: for image ``i`` (CHW uint8, or HWC with ``hwc``), its box
    ``boxes[i]`` (top, left, height, width; floats allowed) resampled to ``size``,
    mirrored where ``flip[i]``, finished. The CPU path, and what the fused kernel is
    checked against."""
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


def pack_images(images: Sequence[Tensor], *, hwc: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The images (CHW uint8, or HWC, any sizes) end to end in one flat tensor (one copy
    kernel), with each one's start and (height, width)."""
    sizes = [image_size(image, hwc) for image in images]
    starts = [0]
    for height, width in sizes[:-1]:
        starts.append(starts[-1] + 3 * height * width)
    flat = torch.cat([image.reshape(-1) for image in images])
    return flat, torch.tensor(starts, dtype=torch.int64), torch.tensor(sizes, dtype=torch.int32)


def crop_resize_finish(
    images: Sequence[Tensor],
    boxes: Tensor,
    size: tuple[int, int],
    flip: Tensor,
    finish: Finish,
    *,
    hwc: bool = False,
) -> Tensor:
    """:func:`crop_resize_finish_reference`'s result; on CUDA with Triton, from one fused
    kernel for the whole batch. ``hwc``: the images are (H, W, 3), as decoders give
    them.

    Example:
        >>> image = torch.arange(48, dtype=torch.uint8).view(1, 4, 12).expand(3, 4, 12)
        >>> boxes = torch.tensor([[0.0, 0.0, 4.0, 12.0]])
        >>> out = crop_resize_finish([image], boxes, (2, 3), torch.tensor([False]), Finish())
        >>> out[0, 0].tolist()
        [[10, 14, 18], [29, 33, 37]]
    """
    if len(images) and images[0].device.type == "cuda":
        fused = _fused()
        if fused is not None:
            return fused(images, boxes, size, flip, finish, hwc=hwc)
    return crop_resize_finish_reference(images, boxes, size, flip, finish, hwc=hwc)


@functools.cache
def _fused() -> Callable[..., Tensor] | None:
    """The Triton kernel's entry point, or None where Triton does not import (it ships
    with torch's CUDA wheels on Linux)."""
    try:
        from fastload.gpu.functional.resample_triton import crop_resize_finish as fused
    except ImportError:
        return None
    return fused
