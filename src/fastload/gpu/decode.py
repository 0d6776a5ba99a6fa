"""GPUDecoder: decode a batch of encoded images on the GPU, then bring them to one size.

The CPU only reads bytes. JPEGs are decoded in one batched nvJPEG call (torchcodec's
``decode_jpeg`` where installed, the supported path from torchvision 0.29 on; else
torchvision's); anything nvJPEG refuses (PNG, CMYK, a corrupt file) is decoded on the
CPU by OpenCV, for that image only. Images of any sizes then become one NCHW uint8
batch through per-sample boxes (a random resized crop, a centre crop or a plain
resize) resampled by one ``roi_align`` per chunk.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor, nn

from fastload._checks import check_int, finite, positive_pair
from fastload.collate import EncodedBatch
from fastload.datasets.decode import decode_image, is_jpeg
from fastload.gpu.arguments import output_size
from fastload.gpu.base import Params, draw_uniform
from fastload.gpu.boxes import TRIES, sample_boxes
from fastload.gpu.functional import resized_crops
from fastload.system import available_cpus, default_device

__all__ = ["GPUDecoder"]

logger = logging.getLogger(__name__)

CROPS = ("random", "center", "resize")


def _nvjpeg() -> Callable[[list[Tensor], torch.device], list[Tensor]]:
    """The batched JPEG decoder of the installed PyTorch ecosystem."""
    try:
        from torchcodec.decoders import decode_jpeg

        return lambda data, device: decode_jpeg(data, mode="RGB", device=device)
    except (ImportError, OSError, RuntimeError):  # absent, or built for another torch
        from torchvision.io import ImageReadMode, decode_jpeg

        return lambda data, device: decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def _place(slot: Tensor, image: Tensor) -> None:
    """Copy ``image`` into the top-left of ``slot`` and repeat its last column and row into
    the rest: bilinear samples at the image's edge then see the edge, not padding (as in
    torchvision's resize, which clamps at the border)."""
    height, width = image.shape[-2:]
    slot[:, :height, :width] = image
    slot[:, :height, width:] = slot[:, :height, width - 1 : width]
    slot[:, height:, :] = slot[:, height - 1 : height, :]


class GPUDecoder(nn.Module):
    """Decode a batch of encoded images (an :class:`~fastload.collate.EncodedBatch`, or a
    list of 1-D uint8 CPU tensors) to one NCHW uint8 batch.

    Use it as ``DataPrefetcher(loader, decoder=GPUDecoder(224))`` with a dataset that
    returns bytes (``LMDBDataset(decode=None)``, ``ImageFolder(decode=None)``) and
    ``collate_fn=fastload.collate.encoded_collate``; or call it on such a batch.

    Args:
        size: Output ``(h, w)`` (an int for a square).
        crop: ``"random"``: a RandomResizedCrop per sample (``scale``, ``ratio`` as in
            torchvision); ``"center"``: resize the shorter side to
            ``size / crop_fraction`` and take the centre (the usual evaluation
            transform); ``"resize"``: the whole image, aspect not kept.
        device: Where to decode: the current CUDA device if available. On a CPU the
            same API decodes with OpenCV in a thread pool.
        threads: Threads for CPU decoding (the fallback and the CPU path).
        memory: Bytes of float32 canvas to resample at once; a batch of large images
            is resampled in chunks under it.

        generator: A CPU ``torch.Generator`` for the boxes (drawn on the host, where the
            image sizes are).

    ``cpu_fallbacks`` counts the images the GPU could not decode (warned about once).
    """

    def __init__(
        self,
        size: int | Sequence[int],
        *,
        crop: str = "random",
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        crop_fraction: float = 0.875,
        device: torch.device | str | None = None,
        threads: int | None = None,
        memory: int = 1 << 30,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}, got {crop!r}")
        if not 0 < finite(crop_fraction, "crop_fraction") <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
        self.size = output_size(size)
        self.crop = crop
        self.crop_fraction = float(crop_fraction)
        self.scale, self.ratio = positive_pair(scale, "scale"), positive_pair(ratio, "ratio")
        if device is None:
            device = default_device()
        self.device = torch.device(device)
        self.threads = (
            min(8, available_cpus()) if threads is None else check_int(threads, "threads", low=1)
        )
        self.memory = check_int(memory, "memory", low=1)
        self.generator = generator
        self.cpu_fallbacks = 0
        self._pool: ThreadPoolExecutor | None = None
        self._stream: torch.cuda.Stream | None = None  # nvJPEG's calls, made on first use
        self._accelerated = self.device.type == "cuda"
        self._nvjpeg = _nvjpeg() if self._accelerated else None

    # --- decoding ---------------------------------------------------------------------------

    def _cpu_decode(self, encoded: Sequence[Tensor], indices: list[int]) -> dict[int, Tensor]:
        if self._pool is None:  # made on first use, kept: not a pool per batch
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastload-decode")

        def one(index: int) -> Tensor:
            image = decode_image(encoded[index].numpy(), source=f"image {index} of the batch")
            return torch.from_numpy(image).permute(2, 0, 1)

        decoded = dict(zip(indices, self._pool.map(one, indices), strict=True))
        return {index: image.to(self.device, non_blocking=True) for index, image in decoded.items()}

    def _gpu_decode(self, encoded: Sequence[Tensor], indices: list[int]) -> dict[int, Tensor]:
        """nvJPEG on every index it accepts; the batch first, one by one if it fails.

        torchvision's nvJPEG writes from a stream of its own into memory allocated on the
        current stream, without waiting for the work queued there: a block that the
        previous batch just freed could be overwritten while still being read. So the
        calls run on a stream with no other work, the caller's stream waits for them,
        and each output is recorded on the caller's stream for the allocator.
        """
        nvjpeg = self._nvjpeg
        if nvjpeg is None:
            raise RuntimeError("GPUDecoder: no nvJPEG on a CPU device")
        cuda = self.device.type == "cuda"  # tests stand a CPU decoder in for nvJPEG
        if cuda and self._stream is None:
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call, unused-ignore]
        stream = self._stream
        caller = torch.cuda.current_stream(self.device) if cuda else None
        batch = [encoded[i] for i in indices]
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            try:
                decoded = dict(zip(indices, nvjpeg(batch, self.device), strict=True))
            except RuntimeError:  # the batch call returns nothing when one image fails
                decoded = {}
                for index in indices:
                    with contextlib.suppress(RuntimeError):  # refused: the CPU decodes it
                        decoded[index] = nvjpeg([encoded[index]], self.device)[0]
        if caller is not None and stream is not None:
            caller.wait_stream(stream)
            for image in decoded.values():
                image.record_stream(caller)
        return decoded

    def decode(self, encoded: EncodedBatch | Sequence[Tensor]) -> list[Tensor]:
        """The images as CHW uint8 tensors on the device, in order."""
        if isinstance(encoded, EncodedBatch):
            encoded = list(encoded)
        if not isinstance(encoded, (list, tuple)) or not all(
            isinstance(e, Tensor) for e in encoded
        ):
            raise TypeError(
                "GPUDecoder expects an EncodedBatch or a list of 1-D uint8 tensors of encoded "
                "images (collate with fastload.collate.encoded_collate)"
            )
        all_indices = list(range(len(encoded)))
        decoded: dict[int, Tensor] = {}
        if self._accelerated:
            jpegs = [i for i in all_indices if is_jpeg(encoded[i])]
            decoded = self._gpu_decode(encoded, jpegs) if jpegs else {}
            refused = len(jpegs) - len(decoded)
            fallbacks = len(encoded) - len(decoded)
            if fallbacks:
                self._count_fallbacks(fallbacks, refused)
        rest = [i for i in all_indices if i not in decoded]
        if rest:
            decoded.update(self._cpu_decode(encoded, rest))
        return [decoded[i] for i in all_indices]

    def _count_fallbacks(self, count: int, refused: int) -> None:
        if self.cpu_fallbacks == 0:
            warnings.warn(
                f"{count} image(s) decoded on the CPU: not JPEG, or refused by nvJPEG ({refused}); "
                "further ones are counted in GPUDecoder.cpu_fallbacks",
                stacklevel=3,
            )
        self.cpu_fallbacks += count
        logger.info(
            "GPUDecoder: %d image(s) decoded on the CPU (%d so far)", count, self.cpu_fallbacks
        )

    # --- one size ----------------------------------------------------------------------------

    def sample_params(self, sizes: Tensor, generator: torch.Generator | None = None) -> Params:
        """Per-sample boxes for images of ``sizes`` ((N, 2) heights and widths)."""
        height, width = sizes[:, 0], sizes[:, 1]
        if self.crop == "random":
            uniforms = draw_uniform(len(sizes), TRIES, 4, device=sizes.device, generator=generator)
            boxes = sample_boxes(height, width, uniforms, self.scale, self.ratio)
            return {
                "top": boxes.top,
                "left": boxes.left,
                "height": boxes.height,
                "width": boxes.width,
            }
        if self.crop == "resize":
            zero = torch.zeros_like(height)
            return {"top": zero, "left": zero, "height": height, "width": width}
        # centre: the region that Resize(size / crop_fraction) + CenterCrop(size) keeps
        out_h, out_w = self.size
        scale = (min(out_h, out_w) / self.crop_fraction) / torch.minimum(height, width)
        box_h, box_w = out_h / scale, out_w / scale
        return {
            "top": (height - box_h) / 2,
            "left": (width - box_w) / 2,
            "height": box_h,
            "width": box_w,
        }

    def forward(
        self, encoded: EncodedBatch | Sequence[Tensor], params: Params | None = None
    ) -> Tensor:
        if len(encoded) == 0:  # an empty batch (the last of a filtered epoch, say)
            return torch.empty((0, 3, *self.size), dtype=torch.uint8, device=self.device)
        images = self.decode(encoded)
        # The sizes are known on the host: draw the boxes there and send them without
        # a stream sync (a tensor made from a list on the GPU would wait for the stream).
        sizes = torch.tensor([image.shape[-2:] for image in images], dtype=torch.float32)
        if params is None:
            params = self.sample_params(sizes, self.generator)
        return self._resample(
            images, {key: self._to_device(value) for key, value in params.items()}
        )

    def _to_device(self, values: Tensor) -> Tensor:
        if self.device.type != "cuda" or values.device.type == "cuda":
            return values.to(self.device)
        return values.pin_memory().to(self.device, non_blocking=True)

    def _resample(self, images: list[Tensor], params: Params) -> Tensor:
        """Copy the images into float32 canvases (chunked under ``memory``), edges
        repeated into the padding, and resample every box of a chunk in one roi_align."""
        out = torch.empty((len(images), 3, *self.size), dtype=torch.uint8, device=self.device)
        start = 0
        while start < len(images):
            end, tallest, widest = start, 0, 0
            while end < len(images):
                h, w = images[end].shape[-2:]
                grown = (end - start + 1) * 3 * max(tallest, h) * max(widest, w) * 4
                if end > start and grown > self.memory:
                    break
                tallest, widest, end = max(tallest, h), max(widest, w), end + 1
            canvas = torch.empty(
                (end - start, 3, tallest, widest), dtype=torch.float32, device=self.device
            )
            for slot, image in enumerate(images[start:end]):  # a list: one copy per image
                _place(canvas[slot], image)
            chunk = {key: value[start:end] for key, value in params.items()}
            out[start:end] = (
                resized_crops(canvas, chunk, self.size).round_().clamp_(0, 255).to(torch.uint8)
            )
            start = end
        return out

    def extra_repr(self) -> str:
        return (
            f"size={self.size}, crop={self.crop!r}, device={self.device}, "
            f"cpu_fallbacks={self.cpu_fallbacks}"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_pool=None, _nvjpeg=None, _stream=None)  # threads, handles stay behind
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._nvjpeg = _nvjpeg() if self._accelerated else None
