"""Crop-aware decoding: RandomResizedCrop given the encoded JPEG (decode only the
resolution the drawn crop needs) vs decoding the whole image first, per image on one core.

For each photo size (the generated 500x375 JPEGs, and ``--large`` photo-like JPEGs of
2000x1500, a phone or DSLR photo scaled down) and output size (``--sizes``):

- decode, then crop: fastload's OpenCV decode, then ``fastload.transforms.
  RandomResizedCrop`` on the array;
- crop-aware: the same ``RandomResizedCrop`` given the encoded bytes (the box is drawn
  from the header; libjpeg decodes at 1/2, 1/4 or 1/8 scale when the box allows);
- torchvision v2: ``decode_jpeg`` + ``v2.RandomResizedCrop`` (antialiased), what a
  user would otherwise write;
- NVIDIA DALI ``fn.decoders.image_random_crop`` + antialiased ``fn.resize`` on one CPU
  thread, the same idea in DALI, all the images of a pass as one batch (reported if DALI
  is not installed).

One thread everywhere; variants interleaved round by round after a warm-up round;
medians; CPU ms per image.

Usage:
    python benchmarks/crop_decode.py [--images 200] [--large 60] [--sizes 160,224]
        [--rounds 5] [--plot]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, describe, interleaved, plot, report, results_folder
from benchmarks.lib.data import jpeg_folder
from fastload.decode.opencv import decode_image
from fastload.testing.synthetic import photo_like_image
from fastload.tools.measure import Measurement
from fastload.transforms import RandomResizedCrop


def large_jpegs(count: int, height: int = 1500, width: int = 2000) -> list[bytes]:
    rng = np.random.default_rng(0)
    encoded = []
    for _ in range(count):
        ok, data = cv2.imencode(".jpg", photo_like_image(rng, height, width))
        if not ok:
            raise RuntimeError("OpenCV could not encode a benchmark JPEG")
        encoded.append(data.tobytes())
    return encoded


def timed(fn: Callable[[bytes], object], images: list[bytes]) -> Callable[[], tuple[float, float]]:
    """One pass over ``images``: wall and CPU seconds."""

    def run() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        for data in images:
            fn(data)
        return time.perf_counter() - start, time.process_time() - cpu

    return run


def torchvision_v2(size: int) -> Callable[[bytes], object]:
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    crop = v2.RandomResizedCrop(size, antialias=True)
    return lambda data: crop(decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8)))


def dali(size: int, images: list[bytes]) -> Callable[[], tuple[float, float]]:
    """A pass of DALI over ``images``: one batch of all of them, fed as encoded arrays."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        jpegs = fn.external_source(name="jpegs", dtype=types.UINT8)
        image = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        return fn.resize(image, size=[size, size], antialias=True)

    pipe = pipeline()
    pipe.build()
    arrays = [np.frombuffer(data, np.uint8) for data in images]

    def run() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        pipe.feed_input("jpegs", arrays)
        pipe.run()
        return time.perf_counter() - start, time.process_time() - cpu

    return run


def variants(size: int, images: list[bytes]) -> dict[str, Callable[[], tuple[float, float]]]:
    crop = RandomResizedCrop(size)
    found = {
        "decode, then crop": timed(lambda data: crop(decode_image(data)), images),
        "crop-aware (encoded in)": timed(crop, images),
        "torchvision v2": timed(torchvision_v2(size), images),
    }
    try:
        found["NVIDIA DALI, 1 CPU thread"] = dali(size, images)
    except Exception as error:  # not installed, or no CPU-only support in this version
        print(f"DALI: {describe(error)}")
        found["NVIDIA DALI, 1 CPU thread"] = lambda error=error: _raise(error)
    return found


def _raise(error: Exception) -> tuple[float, float]:
    raise error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200, help="of the 500x375 folder")
    parser.add_argument("--large", type=int, default=60, help="2000x1500 JPEGs to make")
    parser.add_argument("--sizes", default="160,224")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    random.seed(0)
    torch.manual_seed(0)

    photos = {
        "500x375": [p.read_bytes() for p in sorted(jpeg_folder().rglob("*.jpg"))[: args.images]],
        "2000x1500": large_jpegs(args.large),
    }
    rows = []
    for photo, images in photos.items():
        for size in (int(s) for s in args.sizes.split(",")):
            group = f"{photo} to {size} px"
            found = {f"{group}: {name}": run for name, run in variants(size, images).items()}
            results = interleaved(found, rounds=args.rounds)
            for name, measured in results.items():
                if isinstance(measured, str):
                    rows.append(Row(name, None, len(images), note=measured))
                    continue
                cpu = float(np.median([c for _, c in measured])) / len(images)
                extra = {"CPU ms/image": f"{1000 * cpu:.2f}"}
                rows.append(
                    Row(name, Measurement(tuple(w for w, _ in measured)), len(images), extra,
                        versus=f"{group}: decode, then crop")
                )  # fmt: skip
    result = report(
        "crop_decode",
        rows,
        baseline=rows[0].name,
        unit="images",
        settings={k: v for k, v in vars(args).items() if k != "out"} | {"threads": 1},
        out=args.out,
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
