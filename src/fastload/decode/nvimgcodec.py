"""NVIDIA nvImageCodec as GPUDecoder's backend: the hardware JPEG engines first, then
the GPU's CUDA decoder, then the CPU, and only each sample's crop region decoded.

nvImageCodec (``pip install '.[nvimgcodec]'``) applies EXIF orientation and
takes regions in the displayed image's coordinates; its output is HWC. On a machine
without CUDA its CPU backend decodes a region too. It prints errors about optional
libraries (nvJPEG2000, nvTIFF) when imported: :func:`load` silences them.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.dlpack import from_dlpack

from fastload.decode import opencv as decode_module
from fastload.decode.opencv import displayed_size, is_jpeg, is_truncated_jpeg

__all__ = ["HARDWARE_REGIONS", "NvImageCodec", "available", "load", "make_decoder"]

_EXIF_MARK = b"Exif\x00\x00"


@contextlib.contextmanager
def _quiet_file_descriptors() -> Iterator[None]:
    """stdout and stderr to /dev/null at the OS level, for a library's C++ start-up
    messages (Python's own streams flushed first)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


@functools.cache
def load() -> Any:
    """The ``nvidia.nvimgcodec`` module, imported once without its start-up noise, or
    None where it is not installed."""
    try:
        with _quiet_file_descriptors():
            from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def available() -> bool:
    return load() is not None


# nvImageCodec 0.9 hands every region decode from its GPU decoders to the CPU: with
# nvJPEG before 13.2 their upsampled edge pixels can be wrong. The hardware decoder's
# regions match the CPU decoder's as whole images do (tests/decode/test_nvimgcodec.py,
# on CUDA); the CUDA decoder's edges still differ, so only the hardware decoder is let.
HARDWARE_REGIONS = "nvjpeg_hw_decoder:enable_roi_fancy_upsampling=1"


def make_decoder(codec: Any, device_id: int, kinds: Sequence[Any], threads: int) -> Any:
    """An ``nvimgcodec.Decoder`` trying the backend ``kinds`` in order, regions allowed
    on the hardware decoder."""
    with _quiet_file_descriptors():  # its notes on thread counts, on the terminal
        return codec.Decoder(
            device_id=device_id, max_num_cpu_threads=threads,
            backends=[codec.Backend(kind) for kind in kinds], options=HARDWARE_REGIONS,
        )  # fmt: skip


class NvImageCodec:
    """Decodes JPEGs (whole, or a region of each) to HWC uint8 tensors on ``device``.

    On CUDA the hardware decoder takes what it can, the CUDA decoder the rest, the CPU
    what neither takes; ``threads`` bounds its host threads. Work is ordered on the
    current CUDA stream of the calling thread.
    """

    name = "nvimgcodec"

    def __init__(self, device: torch.device, threads: int) -> None:
        codec = load()
        if codec is None:
            raise ImportError(
                "the nvimgcodec backend needs NVIDIA nvImageCodec: pip install '.[nvimgcodec]'"
            )
        self.codec, self.device = codec, device
        kinds = codec.BackendKind
        if device.type == "cuda":
            order = [kinds.HW_GPU_ONLY, kinds.GPU_ONLY, kinds.CPU_ONLY]
            device_id = device.index if device.index is not None else torch.cuda.current_device()
        else:
            order, device_id = [kinds.CPU_ONLY], codec.NVIMGCODEC_DEVICE_CPU_ONLY
        self.decoder = make_decoder(codec, device_id, order, threads)
        self.params = codec.DecodeParams(
            apply_exif_orientation=True, color_spec=codec.ColorSpec.SRGB,
            sample_format=codec.SampleFormat.I_RGB,
        )  # fmt: skip

    def sizes(self, encoded: Sequence[Tensor]) -> dict[int, tuple[int, int]]:
        """The displayed ``(height, width)`` of each image this backend will take: JPEGs
        with a readable header and an end marker (the rest go to OpenCV, which names
        what is wrong with them)."""
        found: dict[int, tuple[int, int]] = {}
        limit = decode_module.MAX_PIXELS
        for index, data in enumerate(encoded):
            array = data.numpy()
            if not is_jpeg(array) or is_truncated_jpeg(array):
                continue
            size: tuple[int, int] | None
            if _EXIF_MARK in array[:65536].tobytes():  # maybe rotated: read what is shown
                size = displayed_size(array, source=f"image {index} of the batch")
            else:
                try:
                    stream = self.codec.CodeStream(array)
                    size = (int(stream.height), int(stream.width))
                except RuntimeError:
                    size = None
            if size is not None and min(size) > 0 and (limit is None or size[0] * size[1] <= limit):
                found[index] = size  # empty or past the limit: OpenCV's path names it
        return found

    def decode(
        self, encoded: Sequence[Tensor], regions: dict[int, tuple[int, int, int, int]]
    ) -> dict[int, Tensor]:
        """``regions``: index -> (top, left, bottom, right) in pixels. Returns the HWC
        crops it decoded (an image it could not is left out)."""
        indices = list(regions)
        if not indices:
            return {}
        streams = []
        for index in indices:
            top, left, bottom, right = regions[index]
            region = self.codec.Region(top, left, bottom, right)
            whole = self.codec.CodeStream(encoded[index].numpy())
            streams.append(whole.get_sub_code_stream(region=region))
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device).cuda_stream if cuda else 0
        images = self.decoder.decode(streams, params=self.params, cuda_stream=stream)
        decoded = {}
        for index, image in zip(indices, images, strict=True):
            if image is None:
                continue
            decoded[index] = (
                from_dlpack(image) if cuda else torch.from_numpy(np.asarray(image.cpu()))
            )
        return decoded
