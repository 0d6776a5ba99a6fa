"""GPU JPEG decoding: GPUDecoder vs torchvision's decode_jpeg on the device vs OpenCV on every
CPU core, on ImageNet-like JPEGs (500x375 crops of real photographs, quality 90).

Each pass decodes every image once, in batches of ``--batch-size`` encoded images held in
memory as 1-D uint8 tensors (what ``LMDBDataset(decode=None)`` hands over):

- OpenCV, one thread per core: fastload's CPU decode (``fastload.decode.opencv``), images in a
  list (the baseline), and the same followed by a resize to 224x224 and one batch on
  the device (the same output as GPUDecoder);
- ``torchvision.io.decode_jpeg(list, device=...)``: one batched nvJPEG call, images out
  as a list;
- nvImageCodec's own batched ``Decoder.decode`` on whole images (a CodeStream per image,
  the decoder as GPUDecoder makes it): the ceiling its nvimgcodec rows are a share of;
- ``GPUDecoder.decode``: the same through fastload (CPU fallback per refused image), with
  each backend installed here (nvImageCodec: the hardware JPEG engines first; nvjpeg);
- ``GPUDecoder(224, flip, mean, std, bfloat16, channels_last)``: decode (nvImageCodec:
  only each crop's region), random resized crop, flip, normalise, for each backend: the
  finished batch a training step takes;
- NVIDIA DALI, ``decoders.image_random_crop`` (mixed on a GPU, at each of
  ``--dali-loads`` for ``hw_decoder_load``) + antialiased resize + ``crop_mirror_normalize``
  to float16 (DALI has no bfloat16), fed the same encoded batches (external_source);
  reported as not installed where it is not.

With CUDA, one more pass per GPU variant runs while ``nvidia-smi`` samples the JPEG
engines' utilisation, which tells whether the hardware decoder was used.

Usage:
    python benchmarks/gpu_decode.py [--images 2048] [--batch-size 256] [--rounds 3]
        [--dali-loads 0,0.65,1] [--budget-s S] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import re
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    device_name,
    interleaved,
    plot,
    report,
    suite_arguments,
    synchronize,
    thread_cpu,
)
from benchmarks.lib.data import photo_jpegs
from benchmarks.lib.engines import EngineSampler
from fastload.decode import GPUDecoder
from fastload.decode.opencv import decode_image
from fastload.system import available_cpus
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def jpeg_engine_use(run: Callable[[], object]) -> str:
    """Run ``run`` while nvidia-smi samples the JPEG (NVJPG) and video decoder engines;
    their use in words, or why it could not be read."""
    with EngineSampler() as engines:
        run()
        time.sleep(0.3)  # the last sample after the work
    return engines.summary()


def batches_of(encoded: list[torch.Tensor], size: int) -> list[list[torch.Tensor]]:
    return [encoded[start : start + size] for start in range(0, len(encoded), size)]


def opencv_decode(pool: ThreadPoolExecutor, resize: int | None, device) -> Callable:
    def one(data: torch.Tensor) -> np.ndarray:
        image = decode_image(data.numpy(), source="benchmark image")
        return (
            cv2.resize(image, (resize, resize), interpolation=cv2.INTER_AREA) if resize else image
        )

    def decode(batch: list[torch.Tensor]):
        images = list(pool.map(one, batch))
        if resize is None:
            return images
        stacked = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2)
        return (
            stacked.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else stacked
        )

    return decode


def torchvision_decode(device) -> Callable:
    return lambda batch: decode_jpeg(batch, mode=ImageReadMode.RGB, device=device)


RAW_NVIMGCODEC = "nvImageCodec Decoder.decode, its own batched call (decode only)"


def nvimgcodec_raw(device: torch.device, threads: int) -> Callable | str:
    """nvImageCodec's own batched call on whole images, with the decoder GPUDecoder makes
    (the same backends, threads and options): a CodeStream per image and the call, nothing
    else (no header, no tensor out). What GPUDecoder's nvimgcodec rows are held against."""
    from fastload.decode import nvimgcodec

    codec = nvimgcodec.load()
    if codec is None:
        return "not installed here: pip install '.[nvimgcodec]'"
    made = nvimgcodec.NvImageCodec(device, threads)

    def decode(batch: list[torch.Tensor]):
        streams = [codec.CodeStream(data.numpy()) for data in batch]
        cuda_stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        return made.decoder.decode(streams, params=made.params, cuda_stream=cuda_stream)

    return decode


def of_the_raw_call(rows: list[Row]) -> None:
    """Each nvimgcodec row's rate as a share of nvImageCodec's own call, in its extras."""
    raw = next((row.per_second for row in rows if row.name == RAW_NVIMGCODEC), None)
    for row in rows:
        if raw and row.per_second is not None and "nvimgcodec" in row.name:
            row.extra["of nvImageCodec's own call"] = f"{100 * row.per_second / raw:.0f}%"


def dali_decode(args, device, load: float, batches: list[list[torch.Tensor]]) -> Callable:
    """DALI's crop-decode-normalise on the same encoded batches, in turn (its own threads,
    its own prefetching): one ``run()`` a batch."""
    from nvidia.dali import fn, pipeline_def, types

    cuda = device.type == "cuda"
    options = {"hw_decoder_load": load} if cuda else {}

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads,
                  device_id=0 if cuda else None, seed=1)  # fmt: skip
    def pipeline():
        jpegs = fn.external_source(source=itertools.cycle(arrays), dtype=types.UINT8)
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed" if cuda else "cpu", output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], **options,
        )  # fmt: skip
        images = fn.resize(images, size=[args.size] * 2, antialias=True)
        return fn.crop_mirror_normalize(
            images, dtype=types.FLOAT16, output_layout="HWC", mirror=fn.random.coin_flip(),
            mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
        )  # fmt: skip

    arrays = [[data.numpy() for data in batch] for batch in batches]
    if len({len(batch) for batch in arrays}) > 1:
        arrays = arrays[:-1]  # DALI's batches are all of one size: the short last one out
    built = pipeline()
    built.build()

    def decode(_batch: list[torch.Tensor]):
        return built.run()

    return decode


def timed_pass(decode: Callable, batches, device) -> Callable[[], dict]:
    """One pass: its seconds, the process's CPU seconds, and each thread's by name."""

    def run():
        synchronize(device)
        threads, cpu, start = thread_cpu(), cpu_seconds_with_workers(), time.perf_counter()
        for batch in batches:
            decode(batch)
        synchronize(device)
        return {
            "seconds": time.perf_counter() - start,
            "cpu": cpu_seconds_with_workers() - cpu,
            "threads": dict(thread_cpu() - threads),
        }

    return run


def by_thread(runs: list[dict], images: int, shown: int = 3) -> str:
    """The threads that used the most CPU over the passes, in ms per image (medians over
    passes), pool threads together (``opencv-decode_3`` is ``opencv-decode``).

    >>> by_thread([{"threads": {"MainThread": 0.2, "w_0": 0.1, "w_1": 0.2}}], 1000)
    'w 0.30, MainThread 0.20'
    """
    passes = []
    for run in runs:
        pooled: dict[str, float] = {}
        for name, seconds in run.get("threads", {}).items():
            pool = re.sub(r"_\d+$", "", name)
            pooled[pool] = pooled.get(pool, 0.0) + seconds
        passes.append(pooled)
    names = {name for pooled in passes for name in pooled}
    medians = {n: statistics.median(p.get(n, 0.0) for p in passes) for n in names}
    top = sorted(medians.items(), key=lambda item: -item[1])[:shown]
    return ", ".join(f"{name} {1000 * s / images:.2f}" for name, s in top if s > 0) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224, help="GPUDecoder's output side")
    parser.add_argument("--threads", type=int, default=available_cpus(), help="OpenCV threads")
    parser.add_argument(
        "--dali-loads", default="0,0.65,1", help="DALI's hw_decoder_load values (a GPU only)"
    )
    suite_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.size = 32, 16, 32
    args.rounds = args.rounds or (1 if args.smoke else 3)
    budget = Budget(args.budget_s)  # making the photos counts too

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    data, source = photo_jpegs(args.images)
    encoded = [torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) for jpeg in data]
    batches = batches_of(encoded, args.batch_size)
    pool = ThreadPoolExecutor(args.threads, thread_name_prefix="opencv-decode")
    where = "on the GPU" if cuda else "on the CPU: no GPU"
    baseline = f"OpenCV, {args.threads} threads (decode only)"
    decoders: dict[str, Callable | str] = {
        baseline: opencv_decode(pool, None, device),
        f"OpenCV, {args.threads} threads + resize {args.size} + batch to device":
            opencv_decode(pool, args.size, device),
        f"torchvision decode_jpeg, list {where} (decode only)": torchvision_decode(device),
    }  # fmt: skip
    decoders[RAW_NVIMGCODEC] = nvimgcodec_raw(device, args.threads)
    backends = ["nvimgcodec", "nvjpeg"] if cuda else ["nvimgcodec", "opencv"]
    used = {}
    for backend in backends:
        try:
            plain = GPUDecoder(args.size, device=device, backend=backend, threads=args.threads)
            finishing = GPUDecoder(
                args.size, device=device, backend=backend, threads=args.threads, flip=0.5,
                mean=MEAN, std=STD, dtype=torch.bfloat16, channels_last=True,
            )  # fmt: skip
        except (ImportError, ValueError) as error:
            plain = finishing = f"not installed here: {error}"
        used[backend] = finishing
        decoders[f"GPUDecoder.decode, {backend}, list {where} (decode only)"] = (
            plain if isinstance(plain, str) else plain.decode
        )
        decoders[f"GPUDecoder({args.size}), {backend}: crop, flip, normalise to bf16 NHWC"] = (
            finishing
        )
    loads = [float(load) for load in args.dali_loads.split(",")] if cuda else [0.0]
    for load in loads:
        name = f"NVIDIA DALI, {'mixed' if cuda else 'CPU'} decode" + (
            f", hw_decoder_load {load:g}" if cuda else ""
        )
        try:
            decoders[name] = dali_decode(args, device, load, batches)
        except ImportError as error:
            decoders[name] = f"not installed here: {error} (bash benchmarks/install_peers.sh)"
    results = interleaved(
        {
            name: timed_pass(decode, batches, device)
            for name, decode in decoders.items()
            if not isinstance(decode, str)
        },
        rounds=args.rounds,
        budget=budget,
    )
    results = {name: results.get(name, decode) for name, decode in decoders.items()}
    engines = {}
    if cuda:
        for name, decode in decoders.items():
            if "OpenCV" not in name and not isinstance(results[name], str):
                assert not isinstance(decode, str)
                longest = max(run["seconds"] for run in results[name])
                if budget.allows(longest + 2, f"reading the JPEG engines' use of {name}"):
                    engines[name] = jpeg_engine_use(timed_pass(decode, batches, device))
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, args.images, note=runs))
            continue
        seconds = Measurement(tuple(run["seconds"] for run in runs))
        cpu = statistics.median(run["cpu"] for run in runs)
        extra = {
            "CPU ms/image": f"{1000 * cpu / args.images:.3f}",
            "CPU cores busy": f"{cpu / seconds.median:.1f}",
            "CPU ms/image by thread": by_thread(runs, args.images),
        }
        if cuda:
            extra["hardware decoder"] = engines.get(name, "-")
        rows.append(Row(name, seconds, args.images, extra))
    of_the_raw_call(rows)
    nvjpeg = "torchcodec" if importlib.util.find_spec("torchcodec") else "torchvision"
    print(f"device: {device_name()}" + ("" if cuda else ": CPU fallback, no GPU figure"))
    result = report(
        "gpu_decode",
        rows,
        baseline=baseline,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {"device": str(device), "images_from": source, "quality": 90,
           "mean_kb": round(sum(map(len, data)) / len(data) / 1000, 1),
           "nvjpeg_from": nvjpeg},
        out=args.out,
        summary={
            "decoded_per_backend": {
                backend: dict(decoder.decoded)
                for backend, decoder in used.items()
                if not isinstance(decoder, str)
            },
            "jpeg_engines": engines,
        },
        cut_short=budget.cut_short,
    )  # fmt: skip
    pool.shutdown()
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
