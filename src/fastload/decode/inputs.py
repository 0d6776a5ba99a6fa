"""What GPUDecoder's host step reads and works out: the encoded batch (each image's
bytes, the header table), which images the GPU takes, and the pixel regions crop boxes
touch."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fastload.collate import EncodedBatch
from fastload.decode import opencv
from fastload.decode.staging import Staged
from fastload.jpeg import (
    COMPONENTS,
    ENDS,
    FRAME,
    HEIGHT,
    ORIENTATION,
    ORIENTATION_TAGS,
    PRECISION,
    WIDTH,
    header_rows,
    header_table,
    jpeg_header,
)

__all__ = ["HostBatch", "Plan", "accelerated", "crop_regions", "pixel_regions", "rest_of"]

# Huffman-coded baseline, extended and progressive frames: what nvJPEG and
# nvImageCodec's GPU decoders take (lossless and arithmetic coding go to OpenCV).
_GPU_FRAMES = np.zeros(256, dtype=bool)
_GPU_FRAMES[[0xC0, 0xC1, 0xC2]] = True


class HostBatch:
    """An encoded batch as GPUDecoder's host step reads it, each view made once: the
    images as tensors (nvJPEG's input) or arrays (nvImageCodec's and OpenCV's), and the
    header table (the one an :class:`~fastload.collate.EncodedBatch` brought from its
    worker, else read here).

    Raises:
        TypeError: Neither an ``EncodedBatch`` nor a list of tensors.
    """

    def __init__(self, encoded: Any) -> None:
        if isinstance(encoded, EncodedBatch):
            self.packed: EncodedBatch | None = encoded
            self.size = len(encoded)
            return
        if not isinstance(encoded, (list, tuple)) or not all(
            isinstance(e, Tensor) for e in encoded
        ):
            raise TypeError(
                "GPUDecoder expects an EncodedBatch or a list of 1-D uint8 tensors of encoded "
                "images (collate with fastload.collate.encoded_collate)"
            )
        self.packed, self.size = None, len(encoded)
        self._tensors = list(encoded)

    def __len__(self) -> int:
        return self.size

    @functools.cached_property
    def tensors(self) -> list[Tensor]:
        if self.packed is None:
            return self._tensors
        offsets = self.packed.offsets
        lengths = [stop - start for start, stop in itertools.pairwise(offsets)]
        return list(torch.split(self.packed.data, lengths))  # views, made in one call

    @functools.cached_property
    def arrays(self) -> list[np.ndarray]:
        if self.packed is None:
            return [tensor.numpy() for tensor in self._tensors]
        data, offsets = self.packed.data.numpy(), self.packed.offsets
        return [data[start:stop] for start, stop in itertools.pairwise(offsets)]

    def array(self, index: int) -> np.ndarray:
        """Image ``index``'s bytes, without making every image's view."""
        if "arrays" in self.__dict__:
            return self.arrays[index]
        view: np.ndarray
        if self.packed is None:
            view = self._tensors[index].numpy()
        else:
            offsets = self.packed.offsets
            view = self.packed.data.numpy()[offsets[index] : offsets[index + 1]]
        return view

    @functools.cached_property
    def headers(self) -> np.ndarray:
        """The (N, 8) :func:`~fastload.jpeg.header_table` of the batch."""
        if self.packed is None:
            return header_rows(jpeg_header(array) for array in self.arrays)
        if self.packed.headers is not None:
            return self.packed.headers
        return header_table(self.packed.data.numpy().data, self.packed.offsets)

    @functools.cached_property
    def displayed(self) -> np.ndarray:
        """(N, 2) heights and widths as shown (EXIF orientation applied); 0 where no
        header was read."""
        return displayed_sizes(self.headers)


def displayed_sizes(headers: np.ndarray) -> np.ndarray:
    """(N, 2) displayed heights and widths of a header table's images."""
    sizes = headers[:, [HEIGHT, WIDTH]]
    transposed = headers[:, ORIENTATION] >= 5  # orientations 5 to 8 swap the sides
    sizes[transposed] = sizes[transposed, ::-1]
    return sizes


def accelerated(headers: np.ndarray, *, orients: bool = False) -> np.ndarray:
    """Which images of a header table a GPU decoder is given: 8-bit Huffman-coded JPEGs
    (baseline, extended, progressive) of 1 or 3 components, with pixels, within
    :data:`~fastload.decode.opencv.MAX_PIXELS`, ending with an end-of-image marker;
    ``orients``, for a decoder that applies the EXIF orientation itself (nvImageCodec):
    not one with several EXIF blocks holding the tag, of which it reads the last and
    OpenCV (and the header, and so the boxes) the first.

    The rest go to OpenCV, which decodes them or names what is wrong with them. The end
    marker is looked for because a decoder may fill what a file cut short lacks with
    grey, where it should refuse it; the header reader looks at the last few bytes only.
    """
    height, width = headers[:, HEIGHT], headers[:, WIDTH]
    takes = (
        _GPU_FRAMES[headers[:, FRAME] & 0xFF]
        & (headers[:, PRECISION] == 8)
        & ((headers[:, COMPONENTS] == 1) | (headers[:, COMPONENTS] == 3))
        & (headers[:, ENDS] == 1)
        & (height > 0)
        & (width > 0)
    )
    limit = opencv.MAX_PIXELS
    if limit is not None:
        takes &= height * width <= limit
    if orients:
        takes &= headers[:, ORIENTATION_TAGS] <= 1
    decodable: np.ndarray = takes
    return decodable


def pixel_regions(boxes: Tensor, sizes: np.ndarray) -> np.ndarray:
    """(N, 4) top, left, bottom, right: the whole pixels each box (top, left, height,
    width) touches, within its image's ``sizes`` (N, 2)."""
    top, left, height, width = boxes.double().numpy().T
    regions: np.ndarray = np.stack(
        [
            np.maximum(0, np.floor(top)),
            np.maximum(0, np.floor(left)),
            np.minimum(sizes[:, 0], np.ceil(top + height)),
            np.minimum(sizes[:, 1], np.ceil(left + width)),
        ],
        axis=1,
    ).astype(np.int64)
    return regions


def crop_regions(
    boxes: Tensor, sizes: np.ndarray, indices: list[int]
) -> dict[int, tuple[int, int, int, int] | None]:
    """The pixel region each box of ``indices`` touches; None where that is the whole
    image (decoded without a sub-stream)."""
    pixels = pixel_regions(boxes[indices], sizes[indices])
    whole = (pixels[:, :2] == 0).all(1) & (pixels[:, 2:] == sizes[indices]).all(1)
    return {
        index: None if is_whole else (region[0], region[1], region[2], region[3])
        for index, region, is_whole in zip(indices, pixels.tolist(), whole.tolist(), strict=True)
    }


def rest_of(indices: list[int], size: int) -> list[int]:
    """The indices below ``size`` that are not in ``indices``."""
    taken = set(indices)
    return [index for index in range(size) if index not in taken]


@dataclasses.dataclass
class Plan:
    """What ``GPUDecoder.plan`` made on the host for ``GPUDecoder.run``: the batch, the
    indices the GPU backend takes (``gpu``; ``gpu_done``: those it decoded), OpenCV's
    images of the others (``host``; ``shared`` of them were the GPU's, given to the CPU by
    ``cpu_share``; ``staged``: the same packed for one copy to a CUDA device), every
    image's displayed ``sizes``, the boxes and flips, and nvImageCodec's crop ``regions``
    (None on the other backends)."""

    batch: HostBatch
    gpu: list[int]
    host: dict[int, Tensor]
    sizes: np.ndarray
    boxes: Tensor
    flip: Tensor
    regions: dict[int, tuple[int, int, int, int] | None] | None
    shared: int = 0
    staged: Staged | None = None
    gpu_done: set[int] = dataclasses.field(default_factory=set)
