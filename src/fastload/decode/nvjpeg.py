"""nvJPEG as GPUDecoder's backend: torchcodec's or torchvision's batched ``decode_jpeg``
on whole images, the batch first and one by one where it fails. Its images are as stored:
nvJPEG ignores EXIF orientation (OpenCV and nvImageCodec apply it), which the caller
applies (:mod:`fastload.decode.orientation`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["decode", "nvjpeg_decoder"]

Nvjpeg = Callable[[list[Tensor], torch.device], list[Tensor]]


def nvjpeg_decoder() -> Nvjpeg:
    """The batched JPEG decoder of the installed PyTorch ecosystem."""
    try:
        from torchcodec.decoders import decode_jpeg

        return lambda data, device: decode_jpeg(data, mode="RGB", device=device)
    except (ImportError, OSError, RuntimeError):  # absent, or built for another torch
        from torchvision.io import ImageReadMode, decode_jpeg

        return lambda data, device: decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def decode(
    nvjpeg: Nvjpeg,
    tensors: Sequence[Tensor],
    indices: list[int],
    device: torch.device,
    stream: torch.cuda.Stream | None,
) -> dict[int, Tensor]:
    """``tensors[indices]`` decoded by ``nvjpeg`` on ``stream``, as stored (no EXIF
    orientation); an image it refuses is left out.

    torchvision's nvJPEG writes from a stream of its own into memory allocated on the
    current stream, without waiting for the work queued there: a block that the
    previous batch just freed could be overwritten while still being read. So the
    calls run on a stream with no other work, the caller's stream waits for them, and
    each output is recorded on the caller's stream for the allocator.
    """
    caller = torch.cuda.current_stream(device) if stream is not None else None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        try:
            decoded = dict(zip(indices, nvjpeg([tensors[i] for i in indices], device), strict=True))
        except RuntimeError:  # the batch call returns nothing when one image fails
            decoded = {}
            for index in indices:
                with contextlib.suppress(RuntimeError):  # refused: the CPU decodes it
                    decoded[index] = nvjpeg([tensors[index]], device)[0]
    if caller is not None and stream is not None:
        caller.wait_stream(stream)
        for image in decoded.values():
            image.record_stream(caller)
    return decoded
