"""The host's decoded images for the device in one copy: packed end to end into one
buffer (pinned, for a CUDA device) on the host step's threads, so that the device step
makes one asynchronous copy instead of one copy per image from pageable memory."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import Tensor

__all__ = ["Staged", "stage"]


@dataclasses.dataclass
class Staged:
    """Images packed end to end in ``buffer``: each index's offset and HWC shape, and
    whether the images are handed out CHW (views, as OpenCV's CHW images are)."""

    buffer: Tensor
    places: dict[int, tuple[int, tuple[int, int, int]]]
    chw: bool

    def on(self, device: torch.device) -> dict[int, Tensor]:
        """The images on ``device``, after one copy of the whole buffer (asynchronous
        from pinned memory)."""
        flat = self.buffer.to(device, non_blocking=True)
        images = {}
        for index, (offset, shape) in self.places.items():
            image = flat[offset : offset + shape[0] * shape[1] * shape[2]].view(shape)
            images[index] = image.permute(2, 0, 1) if self.chw else image
        return images


def stage(
    images: dict[int, Tensor],
    *,
    chw: bool,
    pin: bool,
    map_: Callable[[Callable[[int], None], Iterable[int]], Iterator[None]] = map,
) -> Staged:
    """``images`` (HWC uint8, or CHW views of HWC memory with ``chw``) copied into one
    buffer, pinned with ``pin``; ``map_`` runs the copies (a thread pool's ``map``: the
    copies release the GIL).

    Example:
        >>> image = torch.arange(24, dtype=torch.uint8).view(2, 4, 3)
        >>> staged = stage({5: image}, chw=False, pin=False)
        >>> torch.equal(staged.on(torch.device("cpu"))[5], image)
        True
    """
    hwc = {index: image.permute(1, 2, 0) if chw else image for index, image in images.items()}
    places, offset = {}, 0
    for index, image in hwc.items():
        height, width, channels = image.shape
        places[index] = (offset, (height, width, channels))
        offset += image.numel()
    buffer = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
    flat = buffer.numpy()

    def copy(index: int) -> None:
        # NumPy's copy, not torch's: one memcpy, where torch's would start an OpenMP team
        # in every pool thread
        start, shape = places[index]
        size = shape[0] * shape[1] * shape[2]
        np.copyto(flat[start : start + size].reshape(shape), hwc[index].numpy())

    for _ in map_(copy, list(hwc)):
        pass
    return Staged(buffer, places, chw)
