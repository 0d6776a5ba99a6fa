"""GPU JPEG decoding: GPUDecoder vs torchvision's decode_jpeg on the device vs OpenCV on every
CPU core, on ImageNet-like JPEGs (500x375 crops of real photographs, quality 90).

Each pass decodes every image once, in batches of ``--batch-size`` encoded images held in
memory as 1-D uint8 tensors (what ``LMDBDataset(decode=None)`` hands over):

- OpenCV, one thread per core: fastload's CPU decode (``fastload.datasets.decode``), images in a
  list (the baseline), and the same followed by a resize to 224x224 and one batch on
  the device (the same output as GPUDecoder);
- ``torchvision.io.decode_jpeg(list, device=...)``: one batched nvJPEG call, images out
  as a list;
- ``GPUDecoder.decode``: the same through fastload (CPU fallback per refused image);
- ``GPUDecoder(224)``: decode, then a random resized crop per image into one batch.

With CUDA, one more pass per GPU variant runs while ``nvidia-smi`` samples the JPEG
engines' utilisation, which tells whether the hardware decoder was used.

Usage:
    python benchmarks/gpu_decode.py [--images 2048] [--batch-size 256] [--rounds 3]
        [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg

from common import (
    Row,
    device_name,
    interleaved,
    plot,
    report,
    suite_arguments,
    synchronize,
)
from data import photo_jpegs
from fastload import gpu
from fastload.datasets.decode import decode_image
from fastload.system import available_cpus
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

ENGINE_QUERY = "utilization.jpeg,utilization.decoder"


def jpeg_engine_use(run: Callable[[], object]) -> str:
    """Run ``run`` while nvidia-smi samples the JPEG (NVJPG) and video decoder engines;
    the peak utilisation of each, or why it could not be read."""
    try:
        monitor = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={ENGINE_QUERY}", "--format=csv,noheader,nounits",
             "-lms", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    except OSError as error:
        return f"unknown (nvidia-smi: {error})"
    time.sleep(0.5)  # its first sample
    try:
        run()
        time.sleep(0.3)
    finally:
        monitor.terminate()
        output = monitor.communicate(timeout=30)[0]
    peaks = [0.0, 0.0]
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        try:
            values = [float(field) for field in fields]
        except ValueError:
            return f"unknown (nvidia-smi: {output.strip().splitlines()[0][:120]})"
        peaks = [max(peak, value) for peak, value in zip(peaks, values, strict=False)]
    return f"JPEG engines peak {peaks[0]:.0f}%, video decoder peak {peaks[1]:.0f}%"


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


def timed_pass(decode: Callable, batches, device) -> Callable[[], dict[str, float]]:
    def run():
        synchronize(device)
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        for batch in batches:
            decode(batch)
        synchronize(device)
        return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds_with_workers() - cpu}

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224, help="GPUDecoder's output side")
    parser.add_argument("--threads", type=int, default=available_cpus(), help="OpenCV threads")
    suite_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.size = 32, 16, 32
    args.rounds = args.rounds or (1 if args.smoke else 3)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    data, source = photo_jpegs(args.images)
    encoded = [torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) for jpeg in data]
    batches = batches_of(encoded, args.batch_size)
    pool = ThreadPoolExecutor(args.threads, thread_name_prefix="opencv-decode")
    where = "on the GPU" if cuda else "on the CPU: no GPU"
    decoder = gpu.GPUDecoder(args.size, device=device)
    baseline = f"OpenCV, {args.threads} threads (decode only)"
    decoders = {
        baseline: opencv_decode(pool, None, device),
        f"OpenCV, {args.threads} threads + resize {args.size} + batch to device":
            opencv_decode(pool, args.size, device),
        f"torchvision decode_jpeg, list {where} (decode only)": torchvision_decode(device),
        f"GPUDecoder.decode, list {where} (decode only)": decoder.decode,
        f"GPUDecoder({args.size}), random resized crop, one batch {where}": decoder,
    }  # fmt: skip
    results = interleaved(
        {name: timed_pass(decode, batches, device) for name, decode in decoders.items()},
        rounds=args.rounds,
    )
    engines = {}
    if cuda:
        for name, decode in decoders.items():
            if "OpenCV" not in name and not isinstance(results[name], str):
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
        }
        if cuda:
            extra["hardware decoder"] = engines.get(name, "-")
        rows.append(Row(name, seconds, args.images, extra))
    backend = "torchcodec" if importlib.util.find_spec("torchcodec") else "torchvision"
    print(f"device: {device_name()}" + ("" if cuda else ": CPU fallback, no GPU figure"))
    result = report(
        "gpu_decode",
        rows,
        baseline=baseline,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {"device": str(device), "images_from": source, "quality": 90,
           "mean_kb": round(sum(map(len, data)) / len(data) / 1000, 1),
           "gpu_decoder_backend": backend},
        out=args.out,
        summary={"gpu_decoder_cpu_fallbacks": decoder.cpu_fallbacks, "jpeg_engines": engines},
    )  # fmt: skip
    pool.shutdown()
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
