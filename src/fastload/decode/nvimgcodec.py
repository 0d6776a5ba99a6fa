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

__all__ = ["HARDWARE_REGIONS", "NvImageCodec", "available", "load", "make_decoder"]


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

    def decode(
        self,
        encoded: Sequence[np.ndarray],
        regions: dict[int, tuple[int, int, int, int] | None],
    ) -> dict[int, Tensor]:
        """``regions``: index -> (top, left, bottom, right) in displayed pixels, or None
        for the whole image. Returns the HWC images it decoded (one it could not is left
        out); which images it is given is decided from their headers beforehand
        (:func:`fastload.decode.inputs.gpu_decodable`)."""
        if not regions:
            return {}
        codec, streams = self.codec, []
        for index, region in regions.items():
            # one CodeStream per image (it keeps a view of the bytes, not a copy); a
            # region needs its sub-stream, the only way nvImageCodec 0.9 takes one
            stream = codec.CodeStream(encoded[index])
            if region is not None:
                stream = stream.get_sub_code_stream(region=codec.Region(*region))
            streams.append(stream)
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device).cuda_stream if cuda else 0
        images = self.decoder.decode(streams, params=self.params, cuda_stream=stream)
        decoded = {}
        for index, image in zip(regions, images, strict=True):
            if image is None:
                continue
            decoded[index] = (
                from_dlpack(image) if cuda else torch.from_numpy(np.asarray(image.cpu()))
            )
        return decoded
