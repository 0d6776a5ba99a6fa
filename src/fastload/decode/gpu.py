"""GPUDecoder: decode a batch of encoded images on the GPU, then bring them to one size.

The CPU only reads bytes. JPEGs are decoded in one batched nvJPEG call (torchcodec's
``decode_jpeg`` where installed, the supported path from torchvision 0.29 on; else
torchvision's); anything nvJPEG refuses (PNG, CMYK, a corrupt file) is decoded on the
CPU by OpenCV, for that image only. Images of any sizes then become one NCHW batch
through per-sample boxes (a random resized crop, a centre crop or a plain resize),
resampled, flipped and finished (dtype, normalisation, layout) in one pass
(:func:`fastload.decode.crop.crop_resize_finish`).
"""

from __future__ import annotations

import collections
import logging
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fastload._checks import check_int, check_probability, finite, positive_pair
from fastload.boxes import TRIES, sample_boxes
from fastload.collate import EncodedBatch
from fastload.decode import nvimgcodec, nvjpeg
from fastload.decode.crop import crop_resize_finish
from fastload.decode.inputs import HostBatch, accelerated, crop_regions, rest_of
from fastload.decode.opencv import decode_image
from fastload.finishing import Finish
from fastload.gpu.arguments import output_size
from fastload.gpu.base import Params, draw_uniform
from fastload.jpeg import ORIENTATION
from fastload.system import available_cpus, default_device

__all__ = ["GPUDecoder"]

logger = logging.getLogger(__name__)

CROPS = ("random", "center", "resize")
BACKENDS = ("auto", "nvimgcodec", "nvjpeg", "opencv")
BOX = ("top", "left", "height", "width")


class GPUDecoder(nn.Module):
    """Decode a batch of encoded images to one NCHW batch of one size (uint8 by default).

    The batch is an :class:`~fastload.collate.EncodedBatch`, or a list of 1-D uint8 CPU
    tensors.

    Use it as ``DataPrefetcher(loader, decoder=GPUDecoder(224))`` with a dataset that
    returns bytes (``LMDBDataset(decode=None)``, ``ImageFolder(decode=None)``) and
    ``collate_fn=fastload.collate.encoded_collate``; or call it on such a batch.

    Args:
        size: Output ``(h, w)`` (an int for a square).
        crop: ``"random"``: a RandomResizedCrop per sample (``scale``, ``ratio`` as in
            torchvision); ``"center"``: resize the shorter side to
            ``size / crop_fraction`` and take the centre (the usual evaluation
            transform); ``"resize"``: the whole image, aspect not kept.
        scale: With ``crop="random"``, the range of the crop's area, as a fraction of the
            image's.
        ratio: With ``crop="random"``, the range of the crop's aspect ratio.
        crop_fraction: With ``crop="center"``, the part of the resized image kept, in
            (0, 1].
        device: Where to decode: the current CUDA device if available. On a CPU the
            same API decodes with OpenCV in a thread pool.
        threads: Threads for CPU decoding (the fallback and the CPU path).
        flip: Probability of mirroring each sample left to right (torchvision's
            ``RandomHorizontalFlip(p)``), in the same pass.
        mean: Normalise as torchvision's ``Normalize`` on the 0..1 scale; with
            ``dtype``, the decoder finishes the batch and ``DataPrefetcher`` leaves its
            image alone (give it no ``mean``/``std`` of its own).
        std: The standard deviations that go with ``mean``.
        statistics_scale: 255 for ``mean`` and ``std`` on the 0..255 scale (DALI's,
            apex's); a mean above 1 without it is refused.
        dtype: The output's dtype: None keeps uint8 (0..255); a floating dtype gives
            0..1 values, normalised with ``mean``/``std`` (float32 maths, one cast).
        channels_last: The output in ``torch.channels_last`` memory format.
        generator: A CPU ``torch.Generator`` for the boxes and flips (drawn on the host,
            where the image sizes are).
        backend: What decodes: ``"nvimgcodec"`` (NVIDIA nvImageCodec: the hardware JPEG
            engines, then the GPU, then the CPU; only each sample's crop region, the box
            drawn from the header's sizes first), ``"nvjpeg"`` (torchcodec's or
            torchvision's batched nvJPEG, whole images, CUDA only), ``"opencv"`` (the CPU);
            ``"auto"``: ``"nvjpeg"`` on a CUDA device (faster there: the GPU decoding
            guide says why), ``"nvimgcodec"`` on the CPU if installed, else ``"opencv"``.
            ``backend`` afterwards names the one chosen.

    ``decoded`` counts the images each backend decoded (``"opencv"`` also takes what a GPU
    backend cannot: PNG, CMYK, a corrupt file); ``cpu_fallbacks`` counts those on a GPU
    device (warned about once).

    Raises:
        ValueError: An unknown ``crop`` or ``backend``, a ``crop_fraction`` outside
            (0, 1], an invalid ``size``, ``scale``, ``ratio``, ``threads`` or ``flip``,
            ``mean`` without ``std`` (or the reverse) or without ``dtype``, or
            ``backend="nvjpeg"`` on a device that is not CUDA.
        TypeError: A ``dtype`` that is not floating; on a call, a batch that is neither
            an ``EncodedBatch`` nor a list of tensors.
        ImportError: ``backend="nvimgcodec"`` without nvImageCodec installed.
        fastload.decode.opencv.ImageDecodeError: On a call, bytes that no backend
            decodes (a ``ValueError``).

    Example:
        >>> import cv2, numpy as np
        >>> red = np.full((48, 64, 3), (0, 0, 255), np.uint8)  # OpenCV's BGR order
        >>> png = torch.from_numpy(cv2.imencode(".png", red)[1].reshape(-1))
        >>> decoder = GPUDecoder(32, crop="center", device="cpu", backend="opencv")
        >>> batch = decoder([png, png])
        >>> batch.shape, batch.dtype, batch[0, :, 0, 0].tolist()
        (torch.Size([2, 3, 32, 32]), torch.uint8, [255, 0, 0])
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
        flip: float = 0.0,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        dtype: torch.dtype | None = None,
        channels_last: bool = False,
        generator: torch.Generator | None = None,
        backend: str = "auto",
        statistics_scale: float = 1,
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
        self.flip = check_probability(flip, "flip")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        if mean is not None and dtype is None:
            raise ValueError("mean/std need a floating dtype (say torch.float32) to write into")
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype or None, got {dtype}")
        self.dtype, self.channels_last = dtype, bool(channels_last)
        self.finish = (
            Finish(channels_last=self.channels_last)
            if dtype is None
            else Finish.normalized(mean, std, dtype, self.channels_last, statistics_scale)
        )
        self.generator = generator
        self.cpu_fallbacks = 0
        self.decoded: collections.Counter[str] = collections.Counter()
        self.backend = self._choose(backend)
        self._pool: ThreadPoolExecutor | None = None
        self._stream: torch.cuda.Stream | None = None  # nvJPEG's calls, made on first use
        self._start_backend()

    def _choose(self, backend: str) -> str:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        cuda = self.device.type == "cuda"
        if backend == "auto":  # on a GPU, nvJPEG whole: faster than nvImageCodec's regions
            return "nvjpeg" if cuda else "nvimgcodec" if nvimgcodec.available() else "opencv"
        if backend == "nvjpeg" and not cuda:
            raise ValueError(f"backend='nvjpeg' needs a CUDA device, got {self.device}")
        return backend

    def _start_backend(self) -> None:
        """The chosen backend's handles (not pickled: made again where it is unpickled)."""
        self._accelerated = self.backend == "nvjpeg"
        self._nvjpeg = nvjpeg.nvjpeg_decoder() if self._accelerated else None
        self._codec = (
            nvimgcodec.NvImageCodec(self.device, self.threads)
            if self.backend == "nvimgcodec"
            else None
        )

    # --- decoding ---------------------------------------------------------------------------

    def _cpu_decode(
        self, batch: HostBatch, indices: list[int], *, hwc: bool = False
    ) -> dict[int, Tensor]:
        """OpenCV on ``indices``, in a thread pool: CHW views (HWC with ``hwc``)."""
        if not indices:
            return {}
        if self._pool is None:  # made on first use, kept: not a pool per batch
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastload-decode")

        def one(index: int) -> Tensor:
            image = torch.from_numpy(
                decode_image(batch.array(index), source=f"image {index} of the batch")
            )
            return image if hwc else image.permute(2, 0, 1)

        decoded = dict(zip(indices, self._pool.map(one, indices), strict=True))
        self.decoded["opencv"] += len(decoded)
        return {index: image.to(self.device, non_blocking=True) for index, image in decoded.items()}

    # host: which images the GPU backend is given, from the headers alone

    def _gpu_indices(self, batch: HostBatch) -> list[int]:
        if self.backend not in ("nvjpeg", "nvimgcodec"):
            return []
        indices: list[int] = np.flatnonzero(accelerated(batch.headers)).tolist()
        return indices

    # device: the decoders' calls

    def _gpu_decode(self, batch: HostBatch, indices: list[int]) -> dict[int, Tensor]:
        """nvJPEG on every index it accepts, on a stream of its own (made on first use)."""
        if self._nvjpeg is None:
            raise RuntimeError("GPUDecoder: no nvJPEG on a CPU device")
        if self.device.type == "cuda" and self._stream is None:  # tests stand a CPU one in
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call, unused-ignore]
        orientations = batch.headers[:, ORIENTATION].tolist()
        return nvjpeg.decode(
            self._nvjpeg, batch.tensors, indices, orientations, self.device, self._stream
        )

    def decode(self, encoded: EncodedBatch | Sequence[Tensor]) -> list[Tensor]:
        """The images as CHW uint8 tensors on the device, in order (EXIF orientation
        applied, as OpenCV's decode does)."""
        batch = HostBatch(encoded)
        if self._codec is not None:  # whole images
            gpu = self._gpu_indices(batch)
            others = self._cpu_decode(batch, rest_of(gpu, len(batch)), hwc=True)
            images, _ = self._decode_regions(batch, dict.fromkeys(gpu), others)
            return [image.permute(2, 0, 1) for image in images]
        images, _ = self._decode_whole(batch)
        return images

    def _decode_whole(self, batch: HostBatch) -> tuple[list[Tensor], np.ndarray]:
        """nvJPEG (on a CUDA device) or OpenCV: CHW images, and their (N, 2) sizes: the
        headers' for nvJPEG's, the decoded ones for OpenCV's."""
        gpu = self._gpu_indices(batch) if self._accelerated else []
        decoded = self._gpu_decode(batch, gpu) if gpu else {}
        if self._accelerated:
            self.decoded["nvjpeg"] += len(decoded)
            fallbacks = len(batch) - len(decoded)
            if fallbacks:
                self._count_fallbacks(fallbacks, len(gpu) - len(decoded))
        sizes = batch.displayed.copy()
        rest = [i for i in range(len(batch)) if i not in decoded]
        if rest:
            decoded.update(self._cpu_decode(batch, rest))
            sizes[rest] = [decoded[i].shape[-2:] for i in rest]
        return [decoded[i] for i in range(len(batch))], sizes

    def _decode_regions(
        self,
        batch: HostBatch,
        regions: dict[int, tuple[int, int, int, int] | None],
        others: dict[int, Tensor],
    ) -> tuple[list[Tensor], list[int]]:
        """HWC images of every index: nvImageCodec's ``regions`` (top, left, bottom,
        right; None for a whole image); ``others``, the images OpenCV decoded already
        (not ones the GPU takes); OpenCV's whole images for those nvImageCodec refused.
        Also returns the indices nvImageCodec decoded."""
        assert self._codec is not None
        decoded = self._codec.decode(batch.arrays, regions) if regions else {}
        self.decoded["nvimgcodec"] += len(decoded)
        done = list(decoded)
        refused = [i for i in regions if i not in decoded]
        if (refused or others) and self.device.type == "cuda":
            self._count_fallbacks(len(refused) + len(others), len(refused))
        decoded.update(others)
        decoded.update(self._cpu_decode(batch, refused, hwc=True))
        return [decoded[i] for i in range(len(batch))], done

    def _count_fallbacks(self, count: int, refused: int) -> None:
        if self.cpu_fallbacks == 0:
            warnings.warn(
                f"{count} image(s) decoded on the CPU: not JPEG, or refused by {self.backend} "
                f"({refused}); "
                "further ones are counted in GPUDecoder.cpu_fallbacks",
                stacklevel=3,
            )
        self.cpu_fallbacks += count
        logger.info(
            "GPUDecoder: %d image(s) decoded on the CPU (%d so far)", count, self.cpu_fallbacks
        )

    # --- one size ----------------------------------------------------------------------------

    def sample_params(self, sizes: Tensor, generator: torch.Generator | None = None) -> Params:
        """Per-sample boxes for images of ``sizes`` ((N, 2) heights and widths), and
        which samples are flipped."""
        return {**self._boxes(sizes, generator), "flip": self._flips(len(sizes), generator)}

    def _flips(self, n: int, generator: torch.Generator | None) -> Tensor:
        if self.flip == 0:
            return torch.zeros(n, dtype=torch.bool)
        return draw_uniform(n, device=torch.device("cpu"), generator=generator) < self.flip

    def _boxes(self, sizes: Tensor, generator: torch.Generator | None) -> Params:
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

    @property
    def finishes(self) -> bool:
        """Whether the output is finished (a floating dtype): DataPrefetcher then leaves
        the image's dtype and normalisation alone."""
        return self.dtype is not None

    def forward(
        self, encoded: EncodedBatch | Sequence[Tensor], params: Params | None = None
    ) -> Tensor:
        if len(encoded) == 0:  # an empty batch (the last of a filtered epoch, say)
            return self.finish.empty(0, self.size, self.device)
        batch = HostBatch(encoded)
        if self._codec is not None:
            return self._forward_regions(batch, params)
        images, sizes = self._decode_whole(batch)
        # The sizes are known on the host: the boxes are drawn there, and go to the
        # kernel with the images, without a stream sync.
        boxes, flip = self._boxes_and_flips(torch.from_numpy(sizes).float(), params)
        return crop_resize_finish(images, boxes, self.size, flip, self.finish)

    def _forward_regions(self, batch: HostBatch, params: Params | None) -> Tensor:
        """nvImageCodec: sizes from the headers, boxes drawn, only each box decoded."""
        gpu = self._gpu_indices(batch)
        others = self._cpu_decode(batch, rest_of(gpu, len(batch)), hwc=True)
        sizes = batch.displayed.copy()
        for index, image in others.items():
            sizes[index] = image.shape[:2]
        boxes, flip = self._boxes_and_flips(torch.from_numpy(sizes).float(), params)
        regions = crop_regions(boxes, sizes, gpu)
        images, done = self._decode_regions(batch, regions, others)
        # a decoded region: the box in its coordinates (an image OpenCV decoded whole
        # keeps the box)
        corners = [(region[0], region[1]) for i in done if (region := regions[i]) is not None]
        shifted = [i for i in done if regions[i] is not None]
        if shifted:
            boxes[shifted, :2] -= torch.tensor(corners, dtype=boxes.dtype)
        return crop_resize_finish(images, boxes, self.size, flip, self.finish, hwc=True)

    def _boxes_and_flips(self, sizes: Tensor, params: Params | None) -> tuple[Tensor, Tensor]:
        if params is None:
            params = self.sample_params(sizes, self.generator)
        boxes = torch.stack([params[key].float().cpu() for key in BOX], dim=1)
        flip = params.get("flip", torch.zeros(len(sizes), dtype=torch.bool)).cpu()
        return boxes, flip

    def extra_repr(self) -> str:
        return (
            f"size={self.size}, crop={self.crop!r}, flip={self.flip}, dtype={self.dtype}, "
            f"device={self.device}, backend={self.backend!r}, decoded={dict(self.decoded)}"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # threads and handles stay behind
        state.update(_pool=None, _nvjpeg=None, _stream=None, _codec=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_backend()
