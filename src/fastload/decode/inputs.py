"""What GPUDecoder reads and calls: the encoded batch it takes, the pixel region a crop
box touches, and the batched nvJPEG decoder of the installed PyTorch ecosystem."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fastload.collate import EncodedBatch

__all__ = ["encoded_list", "nvjpeg_decoder", "pixel_region"]


def nvjpeg_decoder() -> Callable[[list[Tensor], torch.device], list[Tensor]]:
    """The batched JPEG decoder of the installed PyTorch ecosystem."""
    try:
        from torchcodec.decoders import decode_jpeg

        return lambda data, device: decode_jpeg(data, mode="RGB", device=device)
    except (ImportError, OSError, RuntimeError):  # absent, or built for another torch
        from torchvision.io import ImageReadMode, decode_jpeg

        return lambda data, device: decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def pixel_region(box: Tensor, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The whole pixels ``box`` (top, left, height, width) touches, within ``size``."""
    top, left, height, width = (float(v) for v in box)
    return (
        max(0, math.floor(top)), max(0, math.floor(left)),
        min(size[0], math.ceil(top + height)), min(size[1], math.ceil(left + width)),
    )  # fmt: skip


def encoded_list(encoded: Any) -> list[Tensor]:
    if isinstance(encoded, EncodedBatch):
        return list(encoded)
    if not isinstance(encoded, (list, tuple)) or not all(isinstance(e, Tensor) for e in encoded):
        raise TypeError(
            "GPUDecoder expects an EncodedBatch or a list of 1-D uint8 tensors of encoded "
            "images (collate with fastload.collate.encoded_collate)"
        )
    return list(encoded)
