"""timm's create_loader against fastload.integrations.timm.create_loader, on the CPU.

The same folder of 500x375 photo-like JPEGs, the same train.py configuration: RandAugment
``rand-m9-mstd0.5`` (with ``inc1`` timm posterizes to 0 bits, which Pillow 11 refuses), random
erasing 0.25 in pixel mode, mixup 0.8 / cutmix 1.0
(``FastCollateMixup`` as ``collate_fn``), 224 px, batch 64, 2 workers, both with
``use_prefetcher=True`` on device "cpu". timm reads with ``create_dataset`` (PIL);
fastload with its ``ImageFolder`` (OpenCV, crop-aware decode in the workers) and the
policies, mixing and erasing on the batch. Workers are not persistent, so that each
epoch's worker processes are reaped and their CPU time counted. One epoch is one timed
run: a warm-up epoch each, then the loaders take turns (interleaved); medians; CPU ms
per image (this process and its workers).

Usage:
    python benchmarks/timm_loader.py [--images 512] [--rounds 3] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, interleaved, plot, report, results_folder
from benchmarks.lib.data import photo_folder
from fastload.datasets.folder import ImageFolder
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement


def loaders(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    import timm.data

    from fastload.integrations.timm import create_loader

    def settings(mixup: Any) -> dict[str, Any]:
        return {
            "input_size": (3, args.image_size, args.image_size),
            "batch_size": args.batch_size,
            "is_training": True,
            "auto_augment": "rand-m9-mstd0.5",  # not inc1: see the docstring
            "re_prob": 0.25,
            "re_mode": "pixel",
            "num_workers": args.workers,
            "collate_fn": mixup,
            "device": torch.device("cpu"),
            "persistent_workers": False,
        }

    def mixup() -> Any:
        return timm.data.FastCollateMixup(
            mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10
        )

    return {
        "timm create_loader": timm.data.create_loader(
            timm.data.create_dataset("", root=str(root)), **settings(mixup())
        ),
        "fastload create_loader": create_loader(ImageFolder(root), **settings(mixup())),
    }


def epoch(loader: Any) -> tuple[float, float, int]:
    started, cpu, images = time.perf_counter(), cpu_seconds_with_workers(), 0
    for batch, _ in loader:
        images += len(batch)
    return time.perf_counter() - started, cpu_seconds_with_workers() - cpu, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check it runs")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.image_size, args.rounds = 40, 8, 64, 1
    torch.manual_seed(0)
    root = photo_folder(args.out.parent / ".timm_loader_data" if args.smoke else
                        Path(__file__).parent / ".data" / "timm_loader", args.images)  # fmt: skip
    runs = loaders(root, args)
    results = interleaved({name: (lambda lo=lo: epoch(lo)) for name, lo in runs.items()},
                          rounds=args.rounds)  # fmt: skip
    rows = []
    for name, measured in results.items():
        if isinstance(measured, str):
            rows.append(Row(name, None, 0, note=measured))
            continue
        images = measured[0][2]
        cpu = float(np.median([c for _, c, _ in measured])) / images
        rows.append(Row(name, Measurement(tuple(w for w, _, _ in measured)), images,
                        {"CPU ms/image": f"{1000 * cpu:.2f}"}))  # fmt: skip
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    versions = {"timm": __import__("timm").__version__, "image": "JPEG 500x375"}
    result = report("timm_loader", rows, baseline="timm create_loader", unit="images",
                    settings=settings | versions, out=args.out)  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
