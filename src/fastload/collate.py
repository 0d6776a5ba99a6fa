"""Collate functions that keep pixels uint8: one NCHW stack, or encoded images packed.

Pixels stay uint8 on the CPU; conversion to float and normalisation happen on the
device (``DataPrefetcher(mean=..., std=...)``), so 4x fewer bytes cross shared memory,
pinned memory and PCIe.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

from fastload._checks import check_int
from fastload.batches import Path, map_tensors
from fastload.jpeg import header_table

__all__ = ["EncodedBatch", "chw", "encoded_collate", "padded_collate", "uint8_collate"]


def chw(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A CHW tensor view of an HWC array (no copy), or the CHW tensor itself."""
    if isinstance(image, torch.Tensor):
        return image
    tensor = torch.from_numpy(np.ascontiguousarray(image))  # flips leave negative strides
    return tensor.permute(2, 0, 1) if tensor.dim() == 3 else tensor.unsqueeze(0)


def uint8_collate(batch: Sequence[Any]) -> Any:
    """Stack a batch of images into one NCHW tensor with a single copy.

    Samples are images, or tuples/lists whose first element is the image (HWC ndarrays,
    as albumentations returns them, or CHW tensors); the other elements are collated by
    ``default_collate``. Returns ``[images, labels, ...]`` like ``default_collate``.

    Example:
        >>> batch = [(np.zeros((4, 5, 3), np.uint8), 0), (np.ones((4, 5, 3), np.uint8), 1)]
        >>> images, labels = uint8_collate(batch)
        >>> images.shape, images.dtype, labels.tolist()
        (torch.Size([2, 3, 4, 5]), torch.uint8, [0, 1])
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    if isinstance(batch[0], (tuple, list)):
        images = _stack([sample[0] for sample in batch])
        return [images, *default_collate([tuple(sample[1:]) for sample in batch])]
    return _stack(batch)


def _stack(images: Sequence[np.ndarray | torch.Tensor]) -> torch.Tensor:
    views = [chw(image) for image in images]
    shapes = {tuple(view.shape) for view in views}
    if len(shapes) > 1:
        raise ValueError(
            f"images in a batch differ in shape {sorted(shapes)}: resize or crop them to one "
            "size first (or decode on the GPU, where a batch may mix sizes)"
        )
    out = None
    if get_worker_info() is not None and views[0].device.type == "cpu":
        # In a worker, stack straight into shared memory, as default_collate does: the
        # batch then crosses to the main process without a second copy.
        first = views[0]
        # (torch leaves Tensor._typed_storage, default_collate's way here, unannotated)
        storage = first._typed_storage()._new_shared(len(views) * first.numel(), device="cpu")  # type: ignore[no-untyped-call]
        out = first.new(storage).resize_(len(views), *first.shape)
    return torch.stack(views, out=out)


@dataclass(frozen=True)
class EncodedBatch:
    """The encoded images of a batch in one 1-D uint8 tensor, end to end: image ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``, a view.

    One block of shared memory crosses from a worker per batch, where a list of byte
    tensors costs a file descriptor per image; it is not pinned (see :meth:`pin_memory`).
    Indexing, ``len`` and iteration work as on that list. :meth:`pack` also reads each
    JPEG's header there (``headers``, a :func:`~fastload.jpeg.header_table`),
    in the worker, so the GPU decoder's producer thread parses none.

    Example:
        >>> batch = EncodedBatch.pack([torch.tensor([1, 2], dtype=torch.uint8),
        ...                            torch.tensor([3], dtype=torch.uint8)])
        >>> len(batch), batch[1].tolist(), batch.offsets
        (2, [3], (0, 2, 3))
    """

    data: torch.Tensor
    offsets: tuple[int, ...]
    headers: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def pack(cls, images: Sequence[torch.Tensor | np.ndarray | bytes]) -> EncodedBatch:
        """Copy ``images`` (1-D uint8 tensors, arrays or bytes) into one tensor, and read
        their JPEG headers."""
        arrays = [_byte_array(image, index) for index, image in enumerate(images)]
        offsets = np.concatenate([[0], np.cumsum([array.size for array in arrays])])
        data = np.concatenate(arrays) if arrays else np.empty(0, np.uint8)  # a new array
        bounds = tuple(int(offset) for offset in offsets)
        headers = header_table(data.data, bounds)
        return cls(torch.from_numpy(data), bounds, headers)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> torch.Tensor:
        if not -len(self) <= index < len(self):
            raise IndexError(f"image {index} of a batch of {len(self)}")
        index %= len(self)
        return self.data[self.offsets[index] : self.offsets[index + 1]]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self[index] for index in range(len(self)))

    def pin_memory(self) -> EncodedBatch:
        """The batch itself, not a pinned copy (what ``DataLoader(pin_memory=True)``
        calls): decoders read encoded bytes on the host (headers, Huffman decoding) and
        stage them themselves, so pinning them would only copy every batch once more."""
        return self


def _byte_array(image: torch.Tensor | np.ndarray | bytes, index: int) -> np.ndarray:
    """A view of ``image``'s bytes (read-only ones too: they are only copied from)."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return np.frombuffer(image, np.uint8)
    array = image.numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 1:
        raise TypeError(
            f"sample {index}: encoded images are 1-D uint8 (a dataset with decode=None), "
            f"got {array.dtype} of shape {array.shape}"
        )
    return array


def encoded_collate(batch: Sequence[Any]) -> Any:
    """Pack a batch of encoded images (1-D uint8 tensors of different lengths) into an
    :class:`EncodedBatch`.

    For datasets with ``decode=None``: samples are ``(bytes, label, ...)``; returns
    ``[EncodedBatch, labels, ...]``, the rest collated by ``default_collate``, ready for
    ``DataPrefetcher(decoder=GPUDecoder(...))``.
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    if isinstance(batch[0], (tuple, list)):
        encoded = EncodedBatch.pack([sample[0] for sample in batch])
        return [encoded, *default_collate([tuple(sample[1:]) for sample in batch])]
    return EncodedBatch.pack(batch)


def padded_collate(batch: Sequence[Any], *, multiple: int = 1, fill: int = 0) -> list[Any]:
    """Images of different sizes in one batch: each padded at the bottom and right to the
    largest (rounded up to ``multiple``, say 32 for a detector's strides).

    Samples are ``(image, *fields)``, the image an HWC array or CHW tensor. Returns
    ``[images, valid, sizes, *fields]``: the padded NCHW batch (uint8, or the images'
    one dtype: a batch that mixes dtypes is refused), a bool (N, H, W)
    ``tv_tensors.Mask`` of each image's own pixels (so ``fastload.gpu`` moves it with the
    images), its (N, 2) heights and widths, and each field as a
    tuple with one item per image (boxes and labels differ in count), except that a
    ``tv_tensors.Mask`` is padded with the image (stacked into one (N, H, W) ``Mask``
    when each image has one (H, W) mask; a Mask larger than its image is refused, not
    cropped). ``BoundingBoxes`` keep their coordinates; their
    canvas becomes the padded size, so that later transforms of the batch agree.

    Example:
        >>> samples = [(torch.zeros(3, 4, 5),), (torch.zeros(3, 6, 2),)]
        >>> images, valid, sizes = padded_collate(samples)
        >>> images.shape, sizes.tolist(), valid[1].sum().item()
        (torch.Size([2, 3, 6, 5]), [[4, 5], [6, 2]], 12)
    """
    from torchvision import tv_tensors

    if not batch:
        raise ValueError("cannot collate an empty batch")
    check_int(multiple, "multiple", low=1)
    samples = [sample if isinstance(sample, (tuple, list)) else (sample,) for sample in batch]
    views = [chw(sample[0]) for sample in samples]
    channels = {view.shape[0] for view in views}
    if len(channels) > 1:
        raise ValueError(f"images in a batch differ in channels {sorted(channels)}")
    for index, view in enumerate(views[1:], start=1):
        if view.dtype != views[0].dtype:  # copying into one batch would cast, 0.5 -> 0
            raise ValueError(
                f"images in a batch differ in dtype: sample 0 is {views[0].dtype}, sample "
                f"{index} is {view.dtype} (convert them to one dtype and scale first)"
            )
    sizes = torch.tensor([view.shape[-2:] for view in views], dtype=torch.int64)
    height, width = (-(-int(s) // multiple) * multiple for s in sizes.max(dim=0).values)
    images = views[0].new_full((len(views), views[0].shape[0], height, width), fill)
    valid = torch.zeros(len(views), height, width, dtype=torch.bool)
    for index, view in enumerate(views):
        images[index, :, : view.shape[-2], : view.shape[-1]] = view
        valid[index, : view.shape[-2], : view.shape[-1]] = True

    def pad(index: int, _path: Path, item: torch.Tensor) -> torch.Tensor:
        if isinstance(item, tv_tensors.Mask):
            own = tuple(views[index].shape[-2:])
            if item.shape[-2] > own[0] or item.shape[-1] > own[1]:  # padding would crop it
                raise ValueError(
                    f"sample {index}: a Mask of size {tuple(item.shape[-2:])} does not fit "
                    f"its image of size {own}"
                )
            padding = (0, width - item.shape[-1], 0, height - item.shape[-2])
            padded: torch.Tensor = tv_tensors.wrap(  # a Mask again (torchvision is untyped)
                torch.nn.functional.pad(item.as_subclass(torch.Tensor), padding), like=item
            )
            return padded
        if isinstance(item, tv_tensors.BoundingBoxes):
            boxes: torch.Tensor = tv_tensors.wrap(item, like=item, canvas_size=(height, width))
            return boxes
        return item

    fields = []
    for column in zip(*(sample[1:] for sample in samples), strict=True):
        padded = tuple(  # inside target dicts too
            map_tensors(item, partial(pad, index)) for index, item in enumerate(column)
        )
        if all(isinstance(item, tv_tensors.Mask) and item.dim() == 2 for item in padded):
            fields.append(tv_tensors.Mask(torch.stack(padded)))
        else:
            fields.append(padded)
    # a Mask: valid moves with the images through flips and crops on the batch
    return [images, tv_tensors.Mask(valid), sizes, *fields]
