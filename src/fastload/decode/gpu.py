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

from fastload._checks import (
    check_image_size,
    check_int,
    check_probability,
    finite,
    positive_pair,
)
from fastload.boxes import TRIES, crop_boxes
from fastload.collate import EncodedBatch
from fastload.decode import nvimgcodec, nvjpeg
from fastload.decode.crop import crop_resize_finish
from fastload.decode.inputs import HostBatch, Plan, accelerated, crop_regions, rest_of
from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.decode.orientation import orient
from fastload.decode.staging import stage
from fastload.finishing import Finish
from fastload.gpu.arguments import output_size
from fastload.gpu.base import Params, draw_uniform
from fastload.jpeg import ORIENTATION
from fastload.system import available_cpus, default_device
from fastload.typed_torch import new_stream

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
        cpu_share: The share of each batch's JPEGs that the GPU backend would take which
            OpenCV decodes instead, in :meth:`plan` on ``threads`` threads: spare CPU
            cores as a second decoder beside the GPU's (DALI's ``hw_decoder_load``,
            turned round). Under ``DataPrefetcher`` the next batch is planned while this
            one decodes on the device; a direct call does one after the other. Spread
            through the batch, rounded half up; not counted as fallbacks. 0, the
            default: the GPU backend takes all it can.

    ``decoded`` counts the images each backend decoded (``"opencv"`` also takes what a GPU
    backend cannot: PNG, CMYK, a corrupt file); ``cpu_fallbacks`` counts those on a GPU
    device (warned about once).

    Raises:
        ValueError: An unknown ``crop`` or ``backend``, a ``crop_fraction`` outside
            (0, 1], an invalid ``size``, ``scale``, ``ratio``, ``threads`` or ``flip``,
            ``mean`` without ``std`` (or the reverse) or without ``dtype``, a ``cpu_share``
            outside [0, 1], or
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
        cpu_share: float = 0.0,
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
        self.cpu_share = check_probability(cpu_share, "cpu_share")
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
        """The chosen backend's handles and OpenCV's pool (not pickled: made again where it
        is unpickled). The pool starts its threads on first use; made here, not then, as
        both the planning and the running thread use it."""
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastload-decode")
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
        """OpenCV on ``indices``, in a thread pool: CHW views (HWC with ``hwc``), on the
        host (:meth:`_on_device` puts them on the device)."""
        if not indices:
            return {}

        def one(index: int) -> Tensor:
            image = torch.from_numpy(
                decode_image(batch.array(index), source=f"image {index} of the batch")
            )
            return image if hwc else image.permute(2, 0, 1)

        return dict(zip(indices, self._pool.map(one, indices), strict=True))

    def _on_device(self, plan: Plan, fallback: dict[int, Tensor]) -> dict[int, Tensor]:
        """OpenCV's images on the device, counted: the plan's (staged: in one copy) and the
        ``fallback`` ones the GPU backend refused (one by one: they are rare)."""
        host = plan.staged.on(self.device) if plan.staged is not None else plan.host
        images = {**host, **fallback}
        self.decoded["opencv"] += len(images)
        return {index: image.to(self.device, non_blocking=True) for index, image in images.items()}

    def _gpu_decode(self, batch: HostBatch, indices: list[int]) -> dict[int, Tensor]:
        """nvJPEG on every index it accepts, on a stream of its own (made on first use):
        the images as stored, their EXIF orientation not applied."""
        if self._nvjpeg is None:
            raise RuntimeError("GPUDecoder: no nvJPEG on a CPU device")
        if self.device.type == "cuda" and self._stream is None:  # tests stand a CPU one in
            # high priority, as the prefetcher's: ahead of the step's queued kernels
            self._stream = new_stream(self.device, priority=-1)
        return nvjpeg.decode(self._nvjpeg, batch.tensors, indices, self.device, self._stream)

    # --- the host's part: plan ------------------------------------------------------------------

    def plan(self, encoded: EncodedBatch | Sequence[Tensor], params: Params | None = None) -> Plan:
        """The host's part of :meth:`forward`, no device work: the headers, which images
        the GPU backend takes, OpenCV's decode of the others, each sample's box and flip
        (and nvImageCodec's crop regions). :meth:`run` does the rest; DataPrefetcher
        plans the next batch while this one runs."""
        batch = HostBatch(encoded)
        hwc = self._codec is not None
        if not len(batch):
            empty = torch.zeros(0)
            return Plan(batch, [], {}, np.zeros((0, 2)), empty.view(0, 4), empty.bool(), None)
        gpu = self._gpu_indices(batch)
        shared = self._shared_with_the_cpu(gpu)
        if shared:
            gpu = sorted(set(gpu) - set(shared))
        host = self._cpu_decode(batch, rest_of(gpu, len(batch)), hwc=hwc)
        sizes = batch.displayed.copy()
        for index, image in host.items():
            sizes[index] = image.shape[:2] if hwc else image.shape[-2:]
        boxes, flip = self._boxes_and_flips(torch.from_numpy(sizes).float(), params)
        regions = crop_regions(boxes, sizes, gpu) if hwc else None
        staged = None
        if host and self.device.type == "cuda":  # one copy from pinned memory, in run()
            staged = stage(host, chw=not hwc, pin=True, map_=self._pool.map)
            host = staged.on(torch.device("cpu"))  # views of it: no second copy held
        return Plan(batch, gpu, host, sizes, boxes, flip, regions, len(shared), staged)

    def _shared_with_the_cpu(self, gpu: list[int]) -> list[int]:
        """The ``cpu_share`` of the GPU backend's images that OpenCV decodes instead,
        spread evenly through them."""
        count = int(len(gpu) * self.cpu_share + 0.5)
        return [gpu[k * len(gpu) // count] for k in range(count)] if count else []

    def _gpu_indices(self, batch: HostBatch) -> list[int]:
        """Which images the GPU backend is given, from the headers alone."""
        if self.backend not in ("nvjpeg", "nvimgcodec") or not len(batch):
            return []
        orients = self.backend == "nvimgcodec"  # nvJPEG's images are turned by the header
        indices: list[int] = np.flatnonzero(accelerated(batch.headers, orients=orients)).tolist()
        return indices

    # --- the device's part: run -----------------------------------------------------------------

    def run(self, plan: Plan) -> Tensor:
        """The device's part of :meth:`forward`: the decode of ``plan``'s images, then
        their boxes cropped, resampled, flipped and finished in one pass."""
        if not len(plan.batch):  # an empty batch (the last of a filtered epoch, say)
            return self.finish.empty(0, self.size, self.device)
        hwc, orientations = plan.regions is not None, None
        if hwc:
            images = self._decoded_regions(plan, plan.regions)
        else:  # nvJPEG's images as stored: the crop reads them as shown
            images, orientations = self._decoded_whole(plan)
        boxes, sizes = plan.boxes, plan.sizes  # the sizes the boxes were drawn for
        if plan.regions is not None:  # a decoded region: the box in its coordinates
            shifted = [i for i in plan.gpu_done if plan.regions[i] is not None]
            if shifted:
                regions = np.array([plan.regions[i] for i in shifted])
                boxes, sizes = boxes.clone(), sizes.copy()
                boxes[shifted, :2] -= torch.from_numpy(regions[:, :2]).to(boxes.dtype)
                sizes[shifted] = regions[:, 2:] - regions[:, :2]
        return crop_resize_finish(
            images, boxes, self.size, plan.flip, self.finish,
            hwc=hwc, sizes=sizes, orientations=orientations,
        )  # fmt: skip

    def decode(self, encoded: EncodedBatch | Sequence[Tensor]) -> list[Tensor]:
        """The images as CHW uint8 tensors on the device, in order (EXIF orientation
        applied, as OpenCV's decode does)."""
        plan = self.plan(encoded, _NO_BOXES)
        if plan.regions is None:
            images, orientations = self._decoded_whole(plan)
            return [orient(image, int(o)) for image, o in zip(images, orientations, strict=True)]
        whole = self._decoded_regions(plan, dict.fromkeys(plan.gpu))
        return [image.permute(2, 0, 1) for image in whole]

    def _decoded_whole(self, plan: Plan) -> tuple[list[Tensor], np.ndarray]:
        """nvJPEG's images (on a CUDA device), OpenCV's for the rest: CHW, in order; and
        the EXIF orientation each is still to be shown in (nvJPEG's as stored, OpenCV's
        as shown: 1)."""
        decoded = self._gpu_decode(plan.batch, plan.gpu) if plan.gpu else {}
        orientations = np.ones(len(plan.batch), np.int64)
        if decoded:
            done = np.fromiter(decoded, np.int64, len(decoded))
            orientations[done] = plan.batch.headers[done, ORIENTATION]
        refused = [index for index in plan.gpu if index not in decoded]
        if self._accelerated:
            self.decoded["nvjpeg"] += len(decoded)
            fallbacks = len(plan.batch) - len(decoded) - plan.shared
            if fallbacks:
                self._count_fallbacks(fallbacks, len(refused))
        decoded.update(self._on_device(plan, self._fallback(plan, refused, hwc=False)))
        return [decoded[index] for index in range(len(plan.batch))], orientations

    def _decoded_regions(
        self, plan: Plan, regions: dict[int, tuple[int, int, int, int] | None] | None
    ) -> list[Tensor]:
        """HWC images of every index: nvImageCodec's ``regions`` (top, left, bottom,
        right; None for a whole image), OpenCV's whole images for the rest and for those
        nvImageCodec refused. ``plan.gpu_done``: the ones nvImageCodec decoded."""
        assert self._codec is not None and regions is not None
        decoded = self._codec.decode(plan.batch.arrays, regions) if regions else {}
        self.decoded["nvimgcodec"] += len(decoded)
        plan.gpu_done = set(decoded)
        refused = [index for index in regions if index not in decoded]
        fallbacks = len(refused) + len(plan.host) - plan.shared
        if fallbacks and self.device.type == "cuda":
            self._count_fallbacks(fallbacks, len(refused))
        decoded.update(self._on_device(plan, self._fallback(plan, refused, hwc=True)))
        return [decoded[index] for index in range(len(plan.batch))]

    def _fallback(self, plan: Plan, refused: list[int], *, hwc: bool) -> dict[int, Tensor]:
        """OpenCV's decode of the images a GPU backend refused, which must have the
        size their header gave the boxes."""
        images = self._cpu_decode(plan.batch, refused, hwc=hwc)
        for index, image in images.items():
            size = tuple(image.shape[:2] if hwc else image.shape[-2:])
            if size != tuple(plan.sizes[index]):
                raise ImageDecodeError(
                    f"image {index} of the batch: its header says {tuple(plan.sizes[index])}, "
                    f"it decodes to {size} (height, width)"
                )
        return images

    def _count_fallbacks(self, count: int, refused: int) -> None:
        if self.cpu_fallbacks == 0:
            warnings.warn(
                f"{count} image(s) decoded on the CPU: not JPEG, or refused by {self.backend} "
                f"({refused}); "
                "further ones are counted in GPUDecoder.cpu_fallbacks",
                stacklevel=4,
            )
        self.cpu_fallbacks += count
        logger.info(
            "GPUDecoder: %d image(s) decoded on the CPU (%d so far)", count, self.cpu_fallbacks
        )

    # --- one size ----------------------------------------------------------------------------

    def sample_params(self, sizes: Tensor, generator: torch.Generator | None = None) -> Params:
        """Per-sample boxes for images of ``sizes`` ((N, 2) heights and widths), and
        which samples are flipped. The boxes are worked out in NumPy, on the host: a
        batch's few values cost less there than in torch's operations.

        Raises:
            ValueError: An image of no pixels (a size under 1), named by its index.
        """
        hosted = sizes.cpu().numpy()
        empty = np.flatnonzero((hosted < 1).any(axis=1))
        if len(empty):
            height, width = hosted[empty[0]].tolist()
            check_image_size(height, width, f"image {empty[0]} of the batch")
        uniforms = None
        if self.crop == "random":
            draws = draw_uniform(len(sizes), TRIES, 4, device=sizes.device, generator=generator)
            uniforms = draws.cpu().numpy()
        boxes = crop_boxes(
            hosted, self.crop, self.size, scale=self.scale, ratio=self.ratio,
            crop_fraction=self.crop_fraction, uniforms=uniforms,
        )  # fmt: skip
        return {
            **{key: torch.from_numpy(value) for key, value in boxes.items()},
            "flip": self._flips(len(sizes), generator),
        }

    def _flips(self, n: int, generator: torch.Generator | None) -> Tensor:
        if self.flip == 0:
            return torch.zeros(n, dtype=torch.bool)
        return draw_uniform(n, device=torch.device("cpu"), generator=generator) < self.flip

    @property
    def finishes(self) -> bool:
        """Whether the output is finished (a floating dtype): DataPrefetcher then leaves
        the image's dtype and normalisation alone."""
        return self.dtype is not None

    def forward(
        self, encoded: EncodedBatch | Sequence[Tensor], params: Params | None = None
    ) -> Tensor:
        return self.run(self.plan(encoded, params))

    def _boxes_and_flips(self, sizes: Tensor, params: Params | None) -> tuple[Tensor, Tensor]:
        if params is _NO_BOXES:  # decode(): whole images, nothing drawn
            return torch.zeros(len(sizes), 4), torch.zeros(len(sizes), dtype=torch.bool)
        if params is None:
            params = self.sample_params(sizes, self.generator)
        boxes = torch.stack([params[key].float().cpu() for key in BOX], dim=1)
        flip = params.get("flip", torch.zeros(len(sizes), dtype=torch.bool)).cpu()
        return boxes, flip

    def extra_repr(self) -> str:
        return (
            f"size={self.size}, crop={self.crop!r}, flip={self.flip}, dtype={self.dtype}, "
            f"device={self.device}, backend={self.backend!r}, cpu_share={self.cpu_share}, "
            f"decoded={dict(self.decoded)}"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # threads and handles stay behind
        state.update(_pool=None, _nvjpeg=None, _stream=None, _codec=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_backend()


_NO_BOXES: Params = {}  # plan() for decode(): whole images, no box drawn
