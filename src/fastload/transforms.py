"""CPU-side sample transforms, run per sample in the workers: the albumentations adapter,
and ``DecodeRandomResizedCrop``, an antialiased random resized crop of the images
OpenCV decodes (or decodes at a reduced size itself).

Pixels stay uint8 on the CPU; conversion to float and normalisation happen on the
GPU (``DataPrefetcher(mean=..., std=...)``), so 4x fewer bytes cross shared memory,
pinned memory and PCIe.
"""

from __future__ import annotations

import math
import os
import random
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import get_worker_info

from fastload._checks import check_image_size, positive_pair
from fastload.boxes import TRIES, sample_box
from fastload.collate import chw
from fastload.decode.inputs import accelerated
from fastload.decode.opencv import decode_image, reduction_factor
from fastload.jpeg import JpegHeader, header_rows, jpeg_header

if TYPE_CHECKING:
    from fastload.decode.nvimgcodec import NvImageCodec

__all__ = ["Albumentations", "DecodeRandomResizedCrop", "RandomResizedCrop", "crop_box"]


class Albumentations:
    """Run an albumentations transform on an HWC uint8 image (or a CHW tensor, seen as
    one); return a CHW tensor.

    The tensor is a view of the transform's output (no copy): the collate that stacks
    the batch makes the one copy. In each DataLoader worker the transform is reseeded
    from torch's per-worker seed: albumentations 2 draws from a generator made when the
    ``Compose`` was built, which forked workers would otherwise all share, giving every
    worker the same sequence of crops and flips.

    Args:
        transform: An ``albumentations.Compose`` (or any callable taking ``image=``).

    Example:
        >>> import albumentations as A
        >>> augment = Albumentations(A.Compose([A.RandomCrop(32, 32), A.HorizontalFlip()]))
        >>> augment(np.zeros((48, 64, 3), np.uint8)).shape
        torch.Size([3, 32, 32])
    """

    def __init__(self, transform: Callable[..., dict[str, Any]]) -> None:
        if not callable(transform):
            raise TypeError(
                f"transform must be an albumentations transform, got {type(transform).__name__}"
            )
        self.transform = transform
        self._seeded_pid: int | None = None
        self._warned = False

    def _reseed_in_worker(self) -> None:
        self._seeded_pid = os.getpid()
        info = get_worker_info()
        reseed = getattr(self.transform, "set_random_seed", None)  # albumentations >= 2
        if info is not None and reseed is not None:
            reseed(info.seed % 2**32)

    def __call__(self, image: np.ndarray | torch.Tensor) -> torch.Tensor:
        if isinstance(image, torch.Tensor) and image.dim() == 3:
            # a CHW tensor (decode="tensor", or DecodeRandomResizedCrop before this)
            image = np.ascontiguousarray(image.permute(1, 2, 0).numpy())
        if not isinstance(image, np.ndarray):
            raise TypeError(
                f"Albumentations takes an HWC uint8 ndarray or a CHW tensor, got "
                f"{type(image).__name__}"
            )
        if self._seeded_pid != os.getpid():
            self._reseed_in_worker()
        out = self.transform(image=image)["image"]
        if out.dtype not in (np.uint8, torch.uint8) and not self._warned:
            self._warned = True
            warnings.warn(
                f"the albumentations transform returns {out.dtype}: normalising on the CPU "
                "moves 4x the bytes of uint8; normalise on the GPU with "
                "DataPrefetcher(mean=..., std=...) instead",
                stacklevel=2,
            )
        return chw(out)

    def __repr__(self) -> str:
        return f"Albumentations({self.transform!r})"


def crop_box(
    height: int,
    width: int,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    rng: random.Random | None = None,
) -> tuple[int, int, int, int]:
    """``(top, left, crop_height, crop_width)`` drawn as torchvision's RandomResizedCrop
    draws them: area and log-aspect uniform, 10 tries, then the whole image with its
    aspect clamped to ``ratio``, centred. Four uniforms a try from ``rng`` (Python's
    ``random`` by default), turned into a box by :func:`fastload.boxes.sample_box`,
    which gives the GPU modules' box for the same uniforms.

    Example:
        >>> crop_box(375, 500, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3))
        (0, 0, 375, 500)

    Raises:
        ValueError: ``height`` or ``width`` under 1.
    """
    check_image_size(height, width, "the image")
    uniform = (rng or random).random
    tries = ((uniform(), uniform(), uniform(), uniform()) for _ in range(TRIES))
    top, left, crop_h, crop_w, _ = sample_box(height, width, tries, scale, ratio)
    return top, left, crop_h, crop_w


class DecodeRandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` for one image on the CPU, in a worker, given
    decoded or still encoded (also ``fastload.transforms.RandomResizedCrop``): a random
    crop, resized to ``size`` by torch's uint8 resampling, antialiased like PIL.

    Takes what ``ImageFolder``/``LMDBDataset`` return (an HWC uint8 array with
    ``decode="numpy"``, or a CHW tensor with ``decode="tensor"``) and returns a CHW uint8
    tensor. The crop is a view and the resize reads it in place, so on 500x375 photos
    this is about 30 % cheaper than ``v2.RandomResizedCrop`` on the same view (which
    gives the same pixels for the same box). Boxes are drawn by :func:`crop_box` from
    Python's ``random``, which DataLoader seeds in every worker.

    Given the encoded image instead (``decode=None``: a 1-D uint8 tensor, or bytes), it
    decodes it too, as DALI's ``image_random_crop`` and FFCV's crop decoder do: the box
    is drawn from the JPEG header (its EXIF orientation read as OpenCV applies it), and
    the image decoded at 1/2, 1/4 or 1/8 scale inside libjpeg whenever the box, so
    reduced, still covers ``size``. Other formats (PNG, WebP: no reduced scale, and an
    EXIF orientation that only their decode tells) are decoded first and the box drawn
    in the decoded image, as for a JPEG whose header this cannot read. On large photos
    that is most draws, and decoding fewer pixels is faster (benchmarks/crop_decode.py);
    the pixels differ from the full decode's by the DCT's own downscaling and a box
    rounded to the reduced grid (1 to 3 levels on average). Where no reduced scale
    applies and NVIDIA nvImageCodec is installed, only the box's region is decoded, on
    the CPU (the same pixels as the full decode's crop).

    Args:
        size: Output ``(height, width)``, or an int for a square.
        scale: Range of the crop's area, as a fraction of the image's.
        ratio: Range of the crop's aspect ratio (width / height).
        antialias: Low-pass filter where the crop shrinks (PIL's and torchvision's
            default); without it, plain bilinear sampling, which aliases.

    Example:
        >>> crop = DecodeRandomResizedCrop(32)
        >>> crop(np.zeros((48, 64, 3), np.uint8)).shape
        torch.Size([3, 32, 32])
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        antialias: bool = True,
    ) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio = positive_pair(scale, "scale"), positive_pair(ratio, "ratio")
        if len(self.size) != 2 or not all(isinstance(s, int) and s > 0 for s in self.size):
            raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
        self.antialias = antialias

    def __call__(self, image: np.ndarray | torch.Tensor | bytes) -> torch.Tensor:
        if isinstance(image, (bytes, memoryview)) or (
            image.dtype in (np.uint8, torch.uint8) and image.ndim == 1
        ):
            return self._decode_and_crop(image)
        pixels = chw(image)
        if pixels.dim() != 3:
            raise ValueError(
                f"{type(self).__name__} takes one HWC array or CHW tensor, got shape "
                f"{tuple(image.shape)}"
            )
        height, width = pixels.shape[-2:]
        top, left, crop_h, crop_w = crop_box(height, width, self.scale, self.ratio)
        return self._resize(pixels[:, top : top + crop_h, left : left + crop_w])

    def _decode_and_crop(self, encoded: np.ndarray | torch.Tensor | bytes) -> torch.Tensor:
        """Draw the box from a JPEG's header, then decode at the smallest scale (1, 1/2,
        1/4, 1/8 inside libjpeg) at which the box still covers ``size``, and crop there;
        draw it in the decoded image where the header does not give the size decoded."""
        data = (
            encoded.numpy()
            if isinstance(encoded, torch.Tensor)
            else np.frombuffer(encoded, np.uint8)
        )
        header = jpeg_header(data)
        if header is None:  # another format, or a header this does not read
            return self(decode_image(data))
        height, width = header.displayed
        top, left, crop_h, crop_w = crop_box(height, width, self.scale, self.ratio)
        needed = (
            math.ceil(self.size[0] * height / crop_h),
            math.ceil(self.size[1] * width / crop_w),
        )
        factor = reduction_factor(height, width, needed)
        if factor == 1:
            region = _decode_region(data, header, (top, left, top + crop_h, left + crop_w))
            if region is not None:  # nvImageCodec: only the box's pixels, the same values
                return self._resize(region.permute(2, 0, 1))
        pixels = chw(decode_image(data, min_size=needed))
        if pixels.shape[1:] != (-(-height // factor), -(-width // factor)):
            # turned otherwise than the header says (an OpenCV that reads EXIF otherwise
            # than the one the header reader follows): a box drawn in the decoded image,
            # never one stretched to fit
            return self(decode_image(data))
        # the box in the decoded image's pixels (libjpeg rounds scaled sizes up)
        scale_y, scale_x = pixels.shape[1] / height, pixels.shape[2] / width
        y0, x0 = int(top * scale_y), int(left * scale_x)
        y1 = min(pixels.shape[1], max(y0 + 1, round((top + crop_h) * scale_y)))
        x1 = min(pixels.shape[2], max(x0 + 1, round((left + crop_w) * scale_x)))
        return self._resize(pixels[:, y0:y1, x0:x1])

    def _resize(self, crop: torch.Tensor) -> torch.Tensor:
        out = F.interpolate(
            crop[None], size=self.size, mode="bilinear", antialias=self.antialias,
            align_corners=False,
        )  # fmt: skip
        return out[0]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"antialias={self.antialias})"
        )


#: The name torchvision users know; the same class.
RandomResizedCrop = DecodeRandomResizedCrop


def _decode_region(
    data: np.ndarray, header: JpegHeader, region: tuple[int, int, int, int]
) -> torch.Tensor | None:
    """The HWC pixels of ``region`` (top, left, bottom, right) of a JPEG, decoded alone by
    nvImageCodec's CPU backend, or None (not installed, or not a JPEG it takes)."""
    codec = _region_decoder()
    if codec is None or not accelerated(header_rows([header]), orients=True)[0]:
        return None
    return codec.decode([data], {0: region}).get(0)


_REGION_DECODERS: dict[int, NvImageCodec] = {}


def _region_decoder() -> NvImageCodec | None:
    """This process's nvImageCodec CPU decoder (one thread: the DataLoader workers are the
    parallelism), made on first use: a forked worker makes its own."""
    from fastload.decode import nvimgcodec

    if not nvimgcodec.available():
        return None
    pid = os.getpid()
    if pid not in _REGION_DECODERS:
        _REGION_DECODERS.clear()
        _REGION_DECODERS[pid] = nvimgcodec.NvImageCodec(torch.device("cpu"), threads=1)
    return _REGION_DECODERS[pid]
