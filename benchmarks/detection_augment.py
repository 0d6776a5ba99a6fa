"""Detection augmentation: images with boxes, labels and instance masks through
RandomResizedCrop, a horizontal flip and SanitizeBoundingBoxes, per sample with
torchvision v2 vs fastload.gpu on the batch.

Each of ``--batch-size`` uint8 images of ``--input-size`` square carries 1 to 8 boxes,
their labels and their (K, H, W) instance masks. Ways to run the recipe:

- torchvision v2 per sample in ``--workers`` DataLoader workers (the usual way), the
  batch then sent to the device as lists;
- torchvision v2 per sample in a Python loop on the device;
- fastload.gpu on the batch on the device: one call moves images, masks and boxes with
  per-sample parameters, then SanitizeBoundingBoxes per image.

Interleaved rounds after a warm-up round; medians; CPU ms per image (this process and its
workers). On a machine without a GPU the "device" is the CPU.

Usage:
    python benchmarks/detection_augment.py [--batch-size 32] [--input-size 384]
        [--size 320] [--batches 4] [--workers N] [--rounds 3] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    budget_argument,
    device_name,
    interleaved,
    plot,
    report,
    results_folder,
    synchronize,
)
from fastload import gpu
from fastload.system import available_cpus
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement


def make_samples(count: int, size: int, seed: int = 0) -> list[tuple[torch.Tensor, dict]]:
    """Images with 1 to 8 boxes each, their labels and filled-rectangle instance masks."""
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(count):
        image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=generator)
        boxes_n = int(torch.randint(1, 9, (), generator=generator))
        corner = torch.randint(0, size // 2, (boxes_n, 2), generator=generator)
        extent = torch.randint(size // 8, size // 2, (boxes_n, 2), generator=generator)
        xyxy = torch.cat([corner, corner + extent], dim=1).float()
        masks = torch.zeros(boxes_n, size, size, dtype=torch.uint8)
        for k, (x0, y0, x1, y1) in enumerate(xyxy.long().tolist()):
            masks[k, y0:y1, x0:x1] = 1
        target = {
            "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(size, size)),
            "labels": torch.randint(1, 91, (boxes_n,), generator=generator),
            "masks": tv_tensors.Mask(masks),
        }
        samples.append((tv_tensors.Image(image), target))
    return samples


def torchvision_recipe(size: int) -> v2.Compose:
    return v2.Compose([
        v2.RandomResizedCrop(size, scale=(0.3, 1.0), antialias=True), v2.RandomHorizontalFlip(),
        v2.SanitizeBoundingBoxes(),
    ])  # fmt: skip


def fastload_recipe(size: int) -> Callable:
    geometry = nn.Sequential(
        gpu.RandomResizedCrop(size, scale=(0.3, 1.0)), gpu.RandomHorizontalFlip()
    )
    sanitize = gpu.SanitizeBoundingBoxes()

    def augment(images: torch.Tensor, targets: list[dict]):
        return sanitize(*geometry((images, targets)))

    return augment


class Samples(Dataset):
    def __init__(self, samples: list, length: int, transform: Callable) -> None:
        self.samples, self.length, self.transform = samples, length, transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.transform(*self.samples[index % len(self.samples)])


def as_lists(batch: list) -> tuple:
    return tuple(zip(*batch, strict=True))


def move(value, device: torch.device):
    if isinstance(value, dict):
        return {key: move(item, device) for key, item in value.items()}
    return value.to(device, non_blocking=True)


def timed(run: Callable[[], int]) -> Callable[[], dict[str, float]]:
    def measured() -> dict[str, float]:
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        images = run()
        return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds_with_workers() - cpu,
                "images": images}  # fmt: skip

    return measured


def variants(args, device: torch.device) -> dict[str, Callable[[], dict[str, float]]]:
    samples = make_samples(args.batch_size, args.input_size)
    batches = max(args.batches, 4 * args.workers)
    loader = DataLoader(
        Samples(samples, batches * args.batch_size, torchvision_recipe(args.size)),
        batch_size=args.batch_size, num_workers=args.workers, collate_fn=as_lists,
        persistent_workers=args.workers > 0,
    )  # fmt: skip

    def in_workers() -> int:
        for images, targets in loader:
            [move(image, device) for image in images], [move(t, device) for t in targets]
        synchronize(device)
        return batches * args.batch_size

    on_device = [(move(image, device), move(target, device)) for image, target in samples]
    per_sample = torchvision_recipe(args.size)

    def loop_on_device() -> int:
        for _ in range(args.batches):
            [per_sample(image, target) for image, target in on_device]
        synchronize(device)
        return args.batches * args.batch_size

    images = torch.stack([image for image, _ in on_device]).as_subclass(torch.Tensor)
    targets = [target for _, target in on_device]
    ours = fastload_recipe(args.size)

    def on_batch() -> int:
        for _ in range(args.batches):
            ours(images, targets)
        synchronize(device)
        return args.batches * args.batch_size

    return {
        f"torchvision v2 per sample, CPU, {args.workers} workers": timed(in_workers),
        "torchvision v2 per sample, Python loop on the device": timed(loop_on_device),
        "fastload.gpu on the batch": timed(on_batch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--input-size", type=int, default=384)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--workers", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="folder for JSON and PNG")
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: does it run?")
    budget_argument(parser)
    args = parser.parse_args()
    budget = Budget(args.budget_s)
    if args.smoke:
        args.batch_size, args.input_size, args.size, args.batches = 4, 64, 48, 1
        args.workers, args.rounds = min(args.workers, 2), 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    found = variants(args, device)
    results = interleaved(found, rounds=args.rounds, budget=budget)
    baseline = next(iter(found))
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, 0, note=runs))
            continue
        cpu = statistics.median(run["cpu"] for run in runs) / runs[0]["images"]
        rows.append(Row(name, Measurement(tuple(run["seconds"] for run in runs)),
                        runs[0]["images"], {"CPU ms/image": f"{1000 * cpu:.2f}"}))  # fmt: skip
    print(f"device: {device_name()}")
    out = results_folder() if args.out is None else args.out
    result = report(
        "detection_augment", rows, baseline=baseline, unit="images",
        settings={k: v for k, v in vars(args).items() if k != "out"} | {"device": str(device)},
        out=Path(out), cut_short=budget.cut_short,
    )  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
