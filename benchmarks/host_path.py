"""GPUDecoder's host path: the GIL-held Python per batch of 256 JPEGs on the producer
thread, with every GPU call replaced by a stand-in, so it runs on a CPU.

The stand-ins return preallocated outputs of the right shapes at once: nvJPEG's batched
decode (CHW images), nvImageCodec's ``Decoder.decode`` (HWC images, views of each region's
size, made in the stand-in: about 0.5 µs an image counted with nvImageCodec's rows); the
fused crop/resize/finish kernel's launch returns at once too. What is left is the host's own
work: reading headers, choosing what the GPU takes, sizes, boxes, regions, nvImageCodec's
CodeStreams, and the launch's host side (the kernel's table of the images, its arguments'
copies, the output's allocation), which every variant pays alike. The thread's CPU time is
the measure (everything here holds the GIL).

- before: a faithful copy of the host steps of GPUDecoder before header parsing was
  shared (per image: a tensor view, ``is_jpeg``, a whole-file copy and scan for the end
  marker, a 64 KiB copy to look for EXIF, PIL or a CodeStream for the size, then a
  second CodeStream, a Region and a sub-stream; a size tensor from the outputs);
- after: ``GPUDecoder(224)`` itself on an ``EncodedBatch`` from ``encoded_collate``,
  whose headers were read in the worker (that parse is its own row, "collate");
- after, list in: the same on a list of tensors, headers read on the producer.

For the nvjpeg and the nvimgcodec backends; 256 photo-like 500x375 JPEGs, half written
by OpenCV, half by PIL with camera-like EXIF (Make, Model, Orientation). Variants
interleaved round by round after a warm-up round; medians.

Usage:
    python benchmarks/host_path.py [--batch 256] [--rounds 7] [--repeats 5] [--plot]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import math
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, interleaved, plot, report, results_folder
from fastload.collate import EncodedBatch, encoded_collate
from fastload.decode import gpu as gpu_module
from fastload.decode import nvimgcodec
from fastload.decode import opencv as decode_module
from fastload.decode.gpu import GPUDecoder
from fastload.decode.opencv import is_jpeg
from fastload.jpeg import header_table
from fastload.testing.synthetic import photo_like_image
from fastload.tools.measure import Measurement

BUDGET_MS = 1.0  # per batch of 256, issue 48


def photos(count: int) -> list[bytes]:
    """Half OpenCV's JPEGs, half PIL's with a camera's EXIF block."""
    from PIL import Image

    rng = np.random.default_rng(0)
    encoded = []
    for index in range(count):
        bgr = photo_like_image(rng, 375, 500)
        if index % 2 == 0:
            encoded.append(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())
            continue
        exif = Image.Exif()
        exif[0x010F], exif[0x0110], exif[0x0112] = "Camera", "Model 1", 1
        buffer = io.BytesIO()
        Image.fromarray(bgr[:, :, ::-1]).save(buffer, "JPEG", quality=90, exif=exif.tobytes())
        encoded.append(buffer.getvalue())
    return encoded


# --- stand-ins for the GPU calls --------------------------------------------------------------


class Outputs:
    """Preallocated outputs: each image's CHW and HWC pixels."""

    def __init__(self, encoded: list[bytes]) -> None:
        shapes = [
            cv2.imdecode(np.frombuffer(e, np.uint8), cv2.IMREAD_COLOR).shape[:2] for e in encoded
        ]
        self.hwc = [np.zeros((h, w, 3), np.uint8) for h, w in shapes]
        self.chw = [torch.zeros(3, h, w, dtype=torch.uint8) for h, w in shapes]


class NvjpegStandIn:
    def __init__(self, outputs: Outputs) -> None:
        self.outputs = outputs

    def __call__(self, batch: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        return self.outputs.chw[: len(batch)]


class _Image:
    """What nvImageCodec returns: ``.cpu()`` gives an array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def cpu(self) -> np.ndarray:
        return self.array


class NvimgcodecDecoderStandIn:
    """nvImageCodec's ``Decoder.decode``: each stream's image, of its region's size (told
    beforehand with :meth:`expect`: a sub-stream does not say its region)."""

    def __init__(self, outputs: Outputs) -> None:
        self.hwc = outputs.hwc
        self.images: list[_Image] = []

    def expect(self, regions: Mapping[int, tuple[int, int, int, int] | None]) -> None:
        """The images of the next call: ``regions`` (top, left, bottom, right, or None for
        the whole image) of the batch's images, in the streams' order."""
        self.images = [
            _Image(self.hwc[i] if r is None else self.hwc[i][: r[2] - r[0], : r[3] - r[1]])
            for i, r in regions.items()
        ]

    def decode(self, streams: list[Any], *, params: Any = None, cuda_stream: int = 0) -> list[Any]:
        return self.images


class KernelStandIn:
    """Stands in for the fused kernel: ``kernel[grid](...)`` returns at once."""

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def kernel_launch_stood_in() -> Iterator[None]:
    """GPUDecoder's crop goes through the fused kernel's launch, its host side as on a GPU,
    the kernel itself stood in for; as it was afterwards."""
    from fastload.decode import resample_triton

    kernel, dispatch = resample_triton.crop_resize_finish_kernel, gpu_module.crop_resize_finish
    resample_triton.crop_resize_finish_kernel = KernelStandIn()
    gpu_module.crop_resize_finish = resample_triton.crop_resize_finish
    try:
        yield
    finally:
        resample_triton.crop_resize_finish_kernel = kernel
        gpu_module.crop_resize_finish = dispatch


def decoder(backend: str, outputs: Outputs, size: int) -> GPUDecoder:
    """GPUDecoder(size) on the CPU, its GPU calls replaced by the stand-ins."""
    if backend == "nvjpeg":
        made = GPUDecoder(size, device="cpu", backend="opencv", flip=0.5)
        made.backend, made._accelerated = "nvjpeg", True
        made._nvjpeg = NvjpegStandIn(outputs)
        return made
    made = GPUDecoder(size, device="cpu", backend="nvimgcodec", flip=0.5)
    codec = made._codec
    stand_in = codec.decoder = NvimgcodecDecoderStandIn(outputs)
    decode = codec.decode

    def told(encoded: Any, regions: dict[int, tuple[int, int, int, int] | None]) -> Any:
        stand_in.expect(regions)
        return decode(encoded, regions)

    codec.decode = told  # type: ignore[method-assign]
    return made


# --- before: the host steps as they were, kept here as the baseline ---------------------------

_EXIF_MARK = b"Exif\x00\x00"


def old_is_truncated_jpeg(data: np.ndarray) -> bool:
    raw = data.tobytes()
    return raw.rfind(b"\xff\xd9") < raw.rfind(b"\xff\xda")


def old_displayed_size(data: np.ndarray) -> tuple[int, int] | None:
    from PIL import JpegImagePlugin

    head = io.BytesIO(data[:65536].tobytes())
    try:
        with JpegImagePlugin.JpegImageFile(head) as jpeg:
            (width, height), orientation = jpeg.size, jpeg.getexif().get(0x0112, 1)
    except Exception:
        return None
    return (width, height) if orientation in {5, 6, 7, 8} else (height, width)


def old_pixel_region(box: torch.Tensor, size: tuple[int, int]) -> tuple[int, int, int, int]:
    top, left, height, width = (float(v) for v in box)
    return (
        max(0, math.floor(top)), max(0, math.floor(left)),
        min(size[0], math.ceil(top + height)), min(size[1], math.ceil(left + width)),
    )  # fmt: skip


def old_boxes(made: GPUDecoder, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    params = made.sample_params(sizes, made.generator)
    boxes = torch.stack([params[key].float().cpu() for key in gpu_module.BOX], dim=1)
    return boxes, params["flip"].cpu()


def old_nvjpeg(made: GPUDecoder, encoded: EncodedBatch) -> torch.Tensor:
    tensors = list(encoded)  # encoded_list
    jpegs = [i for i in range(len(tensors)) if is_jpeg(tensors[i])]
    assert made._nvjpeg is not None
    decoded = dict(zip(jpegs, made._nvjpeg([tensors[i] for i in jpegs], made.device), strict=True))
    images = [decoded[i] for i in range(len(tensors))]
    sizes = torch.tensor([image.shape[-2:] for image in images], dtype=torch.float32)
    boxes, flip = old_boxes(made, sizes)
    return gpu_module.crop_resize_finish(images, boxes, made.size, flip, made.finish)


def old_sizes(codec: Any, encoded: list[torch.Tensor]) -> dict[int, tuple[int, int]]:
    found: dict[int, tuple[int, int]] = {}
    limit = decode_module.MAX_PIXELS
    for index, data in enumerate(encoded):
        array = data.numpy()
        if not is_jpeg(array) or old_is_truncated_jpeg(array):
            continue
        size: tuple[int, int] | None
        if _EXIF_MARK in array[:65536].tobytes():
            size = old_displayed_size(array)
        else:
            try:
                stream = codec.CodeStream(array)
                size = (int(stream.height), int(stream.width))
            except RuntimeError:
                size = None
        if size is not None and min(size) > 0 and (limit is None or size[0] * size[1] <= limit):
            found[index] = size
    return found


def old_nvimgcodec(made: GPUDecoder, encoded: EncodedBatch) -> torch.Tensor:
    codec = made._codec
    assert codec is not None
    tensors = list(encoded)
    known = old_sizes(codec.codec, tensors)
    sizes = torch.tensor([known[i] for i in range(len(tensors))], dtype=torch.float32)
    boxes, flip = old_boxes(made, sizes)
    regions = {i: old_pixel_region(boxes[i], known[i]) for i in known}
    streams = []
    for index in regions:
        top, left, bottom, right = regions[index]
        region = codec.codec.Region(top, left, bottom, right)
        whole = codec.codec.CodeStream(tensors[index].numpy())
        streams.append(whole.get_sub_code_stream(region=region))
    codec.decoder.expect(regions)
    images = codec.decoder.decode(streams, params=codec.params, cuda_stream=0)
    decoded = {
        index: torch.from_numpy(np.asarray(image.cpu()))
        for index, image in zip(regions, images, strict=True)
    }
    for i, (top, left, bottom, right) in regions.items():
        if tuple(decoded[i].shape[:2]) == (bottom - top, right - left):
            boxes[i, 0] -= top
            boxes[i, 1] -= left
    images = [decoded[i] for i in range(len(tensors))]
    return gpu_module.crop_resize_finish(images, boxes, made.size, flip, made.finish, hwc=True)


# --- timing -----------------------------------------------------------------------------------


def thread_seconds(run: Callable[[], object], repeats: int) -> Callable[[], float]:
    """The median thread CPU seconds of ``repeats`` calls of ``run``, one batch each (the
    thread holds the GIL throughout: its CPU time is the GIL-held time)."""

    def timed() -> float:
        seconds = []
        for _ in range(repeats):
            start = time.thread_time()
            run()
            seconds.append(time.thread_time() - start)
        return float(np.median(seconds))

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5, help="batches per round")
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    if not nvimgcodec.available():
        raise SystemExit("host_path: needs nvImageCodec (pip install '.[nvimgcodec]')")
    if importlib.util.find_spec("triton") is None:
        raise SystemExit("host_path: needs Triton (it comes with torch's Linux wheels)")
    threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)  # one thread's time is the measure
    cv2.setNumThreads(1)
    try:
        with kernel_launch_stood_in():
            measure(args)
    finally:
        torch.set_num_threads(threads[0])
        cv2.setNumThreads(threads[1])


def measure(args: argparse.Namespace) -> None:
    encoded = photos(args.batch)
    outputs = Outputs(encoded)
    samples = [(torch.frombuffer(bytearray(e), dtype=torch.uint8), 0) for e in encoded]
    packed, _ = encoded_collate(samples)  # headers read here, in a worker in training
    as_list = [image for image, _ in samples]
    nvjpeg, codec = decoder("nvjpeg", outputs, args.size), decoder("nvimgcodec", outputs, args.size)

    variants: dict[str, Callable[[], float]] = {
        "collate: read the headers (in the worker)": thread_seconds(
            lambda: header_table(packed.data.numpy().data, packed.offsets), args.repeats
        ),
        "nvjpeg, before": thread_seconds(lambda: old_nvjpeg(nvjpeg, packed), args.repeats),
        "nvjpeg, after": thread_seconds(lambda: nvjpeg(packed), args.repeats),
        "nvjpeg, after, list in": thread_seconds(lambda: nvjpeg(as_list), args.repeats),
        "nvimgcodec, before": thread_seconds(lambda: old_nvimgcodec(codec, packed), args.repeats),
        "nvimgcodec, after": thread_seconds(lambda: codec(packed), args.repeats),
        "nvimgcodec, after, list in": thread_seconds(lambda: codec(as_list), args.repeats),
    }
    results = interleaved(variants, rounds=args.rounds)
    rows = []
    for name, measured in results.items():
        if isinstance(measured, str):
            rows.append(Row(name, None, args.batch, note=measured))
            continue
        ms = 1000 * float(np.median(measured))
        backend = name.split(",")[0]
        extra = {
            "CPU ms/batch": f"{ms:.3f}",
            "CPU µs/image": f"{1000 * ms / args.batch:.2f}",
            f"within {BUDGET_MS:g} ms": "-" if name.startswith("collate") else (
                "yes" if ms * 256 / args.batch <= BUDGET_MS else "no"
            ),
        }  # fmt: skip
        versus = name if name.startswith("collate") else f"{backend}, before"
        rows.append(Row(name, Measurement(tuple(measured)), args.batch, extra, versus=versus))
    result = report(
        "host_path",
        rows,
        baseline="nvjpeg, before",
        unit="images",
        settings={k: v for k, v in vars(args).items() if k != "out"}
        | {"images": "photo-like 500x375 JPEGs, half OpenCV's, half PIL's with EXIF",
           "measure": "thread CPU seconds per batch (GIL held), median of repeats, then of rounds",
           "nvimgcodec": getattr(nvimgcodec.load(), "__version__", "?")},
        out=args.out,
    )  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
