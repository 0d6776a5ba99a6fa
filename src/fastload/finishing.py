"""The last steps of an image batch on its device: dtype, normalisation, memory format.

What DataPrefetcher does to the image after the copy and the transform, in one place.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from fastload.buffers import BufferPool
from fastload.gpu.color import Normalize
from fastload.gpu.functional import normalize, normalize_into

__all__ = ["FLOAT_DTYPES", "ImageFinisher"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class ImageFinisher:
    """Convert an image batch to ``dtype`` (uint8 scaled to 0..1), normalise it with
    ``mean``/``std`` in one multiply-add, and lay it out ``channels_last``.

    On the CPU the float output goes into buffers reused once nothing refers to them
    (``buffers``): a fresh batch-sized tensor costs more in page faults than the maths.

    Example:
        >>> finish = ImageFinisher(torch.float32, mean=[0.5] * 3, std=[0.5] * 3)
        >>> finish(torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)).max().item()
        1.0
    """

    def __init__(
        self,
        dtype: torch.dtype | None,
        *,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        channels_last: bool = False,
        buffers: BufferPool | None = None,
    ) -> None:
        if dtype is not None and dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype must be a floating dtype or None, got {dtype}")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        self.dtype, self.channels_last = dtype, channels_last
        self.normalize = (
            None if mean is None or std is None else Normalize.from_statistics(mean, std)
        )
        self.buffers = BufferPool() if buffers is None else buffers
        self._scale_checked = False

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if self.dtype is not None:
            # The maths in fp32 (fp64 if asked), then one cast: half precision loses
            # nothing that the cast itself would not.
            is_uint8 = image.dtype == torch.uint8
            maths = torch.float64 if self.dtype == torch.float64 else torch.float32
            if self.normalize is not None:
                channels = len(self.normalize.mean)
                if image.dim() != 4 or image.shape[1] != channels:
                    raise ValueError(
                        f"mean/std have {channels} channels; the image batch "
                        f"has shape {tuple(image.shape)} (expected N, C, H, W); if that is "
                        "not the image, name it: DataPrefetcher(..., image=<index or key>)"
                    )
                if not is_uint8 and not self._scale_checked:
                    self._check_float_scale(image)
                affine = self.normalize.affine(image.device, maths, uint8=is_uint8)
                if image.device.type == "cpu":
                    pixels = normalize_into(self._float_buffer(image, maths), image, *affine)
                else:  # uint8 goes in as it is: the multiply-add promotes it, no copy first
                    pixels = normalize(image if is_uint8 else image.to(maths), *affine)
            elif is_uint8:
                on_cpu = image.device.type == "cpu"
                pixels = (
                    image.to(maths) if not on_cpu else self._float_buffer(image, maths).copy_(image)
                )
                pixels = pixels.div_(255)
            else:
                pixels = image.to(maths)
            image = pixels.to(self.dtype)
        if self.channels_last and image.dim() == 4:
            image = image.contiguous(memory_format=torch.channels_last)
        return image

    def _float_buffer(self, image: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        layout = (
            torch.channels_last
            if self.channels_last and image.dim() == 4
            else torch.contiguous_format
        )
        return self.buffers.take(image.shape, dtype, image.device, layout)

    def _check_float_scale(self, image: torch.Tensor) -> None:
        """Once (it waits for the device once): float pixels are taken to be on the 0..1
        scale, and 0..255 floats would be normalised silently wrong."""
        self._scale_checked = True
        if image.numel() and float(image.amax()) > 1.5:
            warnings.warn(
                f"DataPrefetcher got float images with values up to {float(image.amax()):.0f}: "
                "float pixels are normalised as 0..1; divide by 255, or hand over uint8",
                stacklevel=3,
            )
