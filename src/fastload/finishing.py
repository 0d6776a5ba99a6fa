"""The finish of an image batch, the package's one owner of it: dtype, normalisation
(``(pixel - mean) / std`` as one multiply-add), memory format.

- :class:`Statistics`: mean and std read once, with the multiply-add that applies them;
- :class:`ImageFinisher`: what DataPrefetcher does to the image after the copy and the
  transform;
- :class:`Finish`: the same finish as a fused kernel's parameters (GPUDecoder's);
- :class:`FinishesImages`: what a decoder that finishes its batch says, so that
  DataPrefetcher does not finish it twice;
- :func:`settle_finish`: the one rule for who finishes a prefetcher's images (a finishing
  decoder, else the prefetcher's own arguments), disagreements refused.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from fastload._checks import finite
from fastload.buffers import BufferPool

__all__ = [
    "DecoderDtype",
    "Finish",
    "FinishesImages",
    "ImageFinisher",
    "Statistics",
    "normalize",
    "normalize_coefficients",
    "normalize_into",
    "settle_finish",
]

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: The integer image dtypes a finish converts, each with the value that becomes 1.0: its
#: largest, as torchvision's ``to_dtype(..., scale=True)`` scales them (uint8 has paths
#: of its own: the division folded into the normalisation).
_INTEGER_MAX = {
    torch.uint8: 255,
    torch.uint16: 2**16 - 1,
    torch.int8: 2**7 - 1,
    torch.int16: 2**15 - 1,
    torch.int32: 2**31 - 1,
    torch.int64: 2**63 - 1,
}


def normalize_coefficients(
    mean: Sequence[float],
    std: Sequence[float],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    uint8: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(scale, shift)`` of shape (1, C, 1, 1) with ``normalised = pixel * scale +
    shift``, computed in float64; ``uint8=True`` folds the division by 255 into
    ``scale``."""
    mean_ = torch.tensor(tuple(mean), dtype=torch.float64).view(1, -1, 1, 1)
    std_ = torch.tensor(tuple(std), dtype=torch.float64).view(1, -1, 1, 1)
    scale, shift = (1 / std_) / (255 if uint8 else 1), -mean_ / std_
    return scale.to(device, dtype), shift.to(device, dtype)


def normalize(pixels: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    """``pixels * scale + shift`` as one fused multiply-add (``scale`` and ``shift`` from
    :func:`normalize_coefficients`)."""
    return torch.addcmul(shift, pixels, scale)


def normalize_into(out: Tensor, pixels: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    """``out = pixels * scale + shift`` on the CPU, ``scale`` and ``shift`` per channel.

    A contiguous uint8 NCHW batch into float32 takes one OpenCV pass per channel, the
    conversion and the multiply-add in one SIMD loop; otherwise torch converts, then
    multiplies and adds in place (torch's multiply-add reading uint8 directly is not
    vectorised).
    """
    channels = pixels.shape[1]
    if not (
        pixels.dtype == torch.uint8
        and out.dtype == torch.float32
        and pixels.is_contiguous()
        and out.is_contiguous()
        and pixels.numel() > 0
    ):
        return out.copy_(pixels).mul_(scale).add_(shift)
    import cv2

    source = pixels.numpy().reshape(len(pixels), channels, -1)
    target = out.numpy().reshape(len(out), channels, -1)
    for channel, (alpha, beta) in enumerate(
        zip(scale.flatten().tolist(), shift.flatten().tolist(), strict=True)
    ):
        plane = source[:, channel]  # one row per image: OpenCV takes the row stride as it is
        written = cv2.addWeighted(
            plane, alpha, plane, 0.0, beta, dst=target[:, channel], dtype=cv2.CV_32F
        )
        if written.ctypes.data != target[:, channel].ctypes.data:  # OpenCV made its own
            target[:, channel] = written
    return out


class Statistics:
    """Per-channel ``mean`` and ``std`` on the 0..1 scale, checked, and the multiply-add
    that applies them (:meth:`affine`), made once per device and dtype: a tensor built
    from a list is a blocking host-to-device copy.

    Example:
        >>> scale, shift = Statistics([0.5], [0.25]).affine(torch.device("cpu"), torch.float32)
        >>> scale.flatten().tolist(), shift.flatten().tolist()
        ([4.0], [-2.0])
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        if not len(mean):
            raise ValueError("mean must hold one value per channel, got an empty sequence")
        if len(mean) != len(std):
            raise ValueError(f"mean and std differ in length: {len(mean)} and {len(std)}")
        self.mean = tuple(finite(m, "mean") for m in mean)
        self.std = tuple(finite(s, "std") for s in std)
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std must be positive, got {tuple(std)}")
        self._cache: dict[tuple[torch.device, torch.dtype, bool], tuple[Tensor, Tensor]] = {}

    @classmethod
    def read(cls, mean: Sequence[float], std: Sequence[float], scale: float = 1) -> Statistics:
        """Statistics given on the pixel scale ``scale``: 1 (torchvision's 0..1), or 255
        for values on the 0..255 scale (apex's recipe, DALI's), as DataPrefetcher and
        GPUDecoder take them (``statistics_scale=``). A mean above 1 on the 0..1 scale
        is refused, not guessed at.

        Example:
            >>> Statistics.read([127.5], [63.75], scale=255).mean
            (0.5,)
        """
        scale = finite(scale, "statistics_scale")
        if scale not in (1, 255):
            raise ValueError(f"statistics_scale is 1 (0..1 values) or 255, got {scale}")
        mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        if scale == 1 and mean and max(mean) > 1:
            raise ValueError(
                f"mean {mean} is not on the 0..1 scale: for statistics on the 0..255 scale "
                "(apex's, DALI's), pass statistics_scale=255"
            )
        return cls(tuple(m / scale for m in mean), tuple(s / scale for s in std))

    def affine(
        self, device: torch.device, dtype: torch.dtype, *, uint8: bool = False
    ) -> tuple[Tensor, Tensor]:
        """``(scale, shift)`` of shape (1, C, 1, 1) with ``normalised = pixel * scale +
        shift``; ``uint8=True`` folds the division by 255 into ``scale``."""
        key = (device, dtype, uint8)
        if key not in self._cache:
            self._cache[key] = normalize_coefficients(
                self.mean, self.std, device=device, dtype=dtype, uint8=uint8
            )
        return self._cache[key]


@runtime_checkable
class FinishesImages(Protocol):
    """A decoder whose batches come out finished (``finishes``: its ``dtype``, its
    normalisation, ``channels_last`` or not): DataPrefetcher leaves their image as it is,
    and its own ``dtype`` and ``channels_last`` are the decoder's."""

    finishes: bool
    dtype: torch.dtype | None
    channels_last: bool


class DecoderDtype(enum.Enum):
    """DataPrefetcher's default ``dtype``: float32, or the dtype of a decoder that
    finishes its batches (which then owns the finish)."""

    DEFAULT = "float32, or a finishing decoder's dtype"

    def __repr__(self) -> str:
        return f"<{self.value}>"


def settle_finish(
    decoder: object, dtype: torch.dtype | DecoderDtype | None, channels_last: bool
) -> tuple[torch.dtype | None, bool, bool]:
    """The image's ``(dtype, channels_last)`` out of a prefetcher, and whether
    ``decoder`` finishes it (the prefetcher then leaves it alone).

    A finishing decoder owns the finish: a ``dtype`` or ``channels_last=True`` given to
    the prefetcher that says otherwise is refused rather than silently overridden.

    Raises:
        ValueError: the prefetcher's ``dtype`` or ``channels_last`` and the decoder's differ.
    """
    if not (isinstance(decoder, FinishesImages) and decoder.finishes):
        return (torch.float32 if dtype is DecoderDtype.DEFAULT else dtype), channels_last, False
    if dtype is not DecoderDtype.DEFAULT and dtype != decoder.dtype:
        raise ValueError(
            f"DataPrefetcher(dtype={dtype}) but its decoder finishes the batch as "
            f"{decoder.dtype}: give the dtype to the decoder alone"
        )
    if channels_last and not decoder.channels_last:
        raise ValueError(
            "DataPrefetcher(channels_last=True) but its decoder finishes the batch "
            "contiguous: give channels_last=True to the decoder alone"
        )
    return decoder.dtype, decoder.channels_last, True


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
        statistics_scale: float = 1,
    ) -> Finish:
        """0..1 floats (``mean``/``std`` None), or normalised ones: statistics on the
        pixel scale ``statistics_scale`` (see :meth:`Statistics.read`)."""
        if mean is None or std is None:
            return cls((1 / 255,) * 3, (0.0,) * 3, dtype, channels_last)
        scale, shift = Statistics.read(mean, std, statistics_scale).affine(
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


class ImageFinisher:
    """Convert an image batch to ``dtype`` (integers scaled to 0..1 by their dtype's
    largest value, as torchvision's ``to_dtype``: uint8 by 255, uint16 by 65535),
    normalise it with ``mean``/``std`` in one multiply-add, and lay it out
    ``channels_last``.

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
        statistics_scale: float = 1,
    ) -> None:
        if dtype is not None and dtype not in _FLOAT_DTYPES:
            raise TypeError(f"dtype must be a floating dtype or None, got {dtype}")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        self.dtype, self.channels_last = dtype, channels_last
        self.statistics = (
            None if mean is None or std is None else Statistics.read(mean, std, statistics_scale)
        )
        self.buffers = BufferPool() if buffers is None else buffers
        self._scale_checked = False

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """``image`` finished.

        Raises:
            TypeError: An image dtype that is neither floating nor one of the integer
                dtypes torchvision's ``to_dtype`` scales (bool, uint32, complex).
            ValueError: With ``mean``/``std``, an image that is not (N, C, H, W) with their
                number of channels.
        """
        if self.dtype is not None:
            # The maths in fp32 (fp64 if asked), then one cast: half precision loses
            # nothing that the cast itself would not.
            maths = torch.float64 if self.dtype == torch.float64 else torch.float32
            if image.dtype != torch.uint8 and not image.is_floating_point():
                image = _unit_scale(image, maths)  # uint16 and the others: 0..1 floats
            is_uint8 = image.dtype == torch.uint8
            if self.statistics is not None:
                channels = len(self.statistics.mean)
                if image.dim() != 4 or image.shape[1] != channels:
                    raise ValueError(
                        f"mean/std have {channels} channels; the image batch "
                        f"has shape {tuple(image.shape)} (expected N, C, H, W); if that is "
                        "not the image, name it: DataPrefetcher(..., image=<index or key>)"
                    )
                if not is_uint8 and not self._scale_checked:
                    self._check_float_scale(image)
                affine = self.statistics.affine(image.device, maths, uint8=is_uint8)
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


def _unit_scale(image: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An integer image as ``dtype`` floats, divided by its dtype's largest value as
    torchvision's ``to_dtype(..., scale=True)`` does (a multiply by the reciprocal)."""
    largest = _INTEGER_MAX.get(image.dtype)
    if largest is None:
        names = ", ".join(str(integer) for integer in list(_INTEGER_MAX)[:-1])
        raise TypeError(
            f"the image batch is {image.dtype}: DataPrefetcher converts floating images and "
            f"{names} and {list(_INTEGER_MAX)[-1]} ones (scaled to 0..1 by the largest "
            "value, as torchvision's to_dtype), or leaves the dtype alone with dtype=None"
        )
    return image.to(dtype).mul_(1.0 / largest)
