"""Feeding a training step: the usual loop vs apex's data_prefetcher vs DataPrefetcher.

A small convolutional network trains on uint8 images served by a FastLoader (workers
decode nothing: the images sit in memory, so what is measured is the hand-over to the
device). Three ways to feed it:

(a) usual:   the dataset returns float32 normalised on the CPU; `.to(device)` in the loop.
(b) apex:    uint8 batches; apex's `data_prefetcher` (the recipe of shared/seeds/001,
             written out below) copies on a side stream, then `.float()`, `sub_`, `div_`.
(c) fastload: uint8 batches; `DataPrefetcher` (side stream, fused normalise), at each
             of ``--depths`` batches in flight.

Reports step time, the fraction of the loop spent waiting for a batch, and bytes
copied per batch. Without CUDA everything runs on the CPU and the table says so: the
step then dominates and the streams do not exist, so only (a)'s extra CPU work shows.

Usage:
    python benchmarks/prefetch.py [--steps 30] [--batch-size 64] [--image-size 96] [--plot]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn
from torch.utils.data import Dataset

from common import Row, device_name, plot, report
from fastload import DataPrefetcher, FastLoader
from fastload.timing import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class InMemoryImages(Dataset):
    """uint8 CHW images held in memory; ``normalise`` mimics ToTensor + Normalize."""

    def __init__(self, count: int, size: int, normalise: bool) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randint(
            0, 256, (count, 3, size, size), dtype=torch.uint8, generator=generator
        )
        self.labels = torch.randint(0, 10, (count,), generator=generator)
        self.normalise = normalise
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index]
        if self.normalise:
            image = (image.float() / 255 - self.mean) / self.std
        return image, self.labels[index]


class ApexPrefetcher:
    """NVIDIA apex's ``data_prefetcher`` (examples/imagenet/main_amp.py), as users copy it;
    the stream calls are skipped on a CPU so that the script runs anywhere."""

    def __init__(self, loader, device: torch.device) -> None:
        self.loader = iter(loader)
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream() if self.cuda else None
        self.mean = torch.tensor([m * 255 for m in MEAN], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([s * 255 for s in STD], device=device).view(1, 3, 1, 1)
        self.preload()

    def preload(self) -> None:
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None
            return
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            self.next_input = self.next_input.to(self.device, non_blocking=True)
            self.next_target = self.next_target.to(self.device, non_blocking=True)
            self.next_input = self.next_input.float()
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)

    def next(self):
        if self.cuda:
            torch.cuda.current_stream().wait_stream(self.stream)
        images, target = self.next_input, self.next_target
        if images is not None and self.cuda:
            images.record_stream(torch.cuda.current_stream())
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return images, target


def small_convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    )  # fmt: skip


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def usual_batches(loader, device):
    for images, labels in loader:
        yield images.to(device), labels.to(device)


def apex_batches(loader, device):
    prefetcher = ApexPrefetcher(loader, device)
    images, labels = prefetcher.next()
    while images is not None:
        yield images, labels
        images, labels = prefetcher.next()


def fastload_batches(depth: int):
    def batches(loader, device):
        yield from DataPrefetcher(loader, device, mean=MEAN, std=STD, depth=depth)

    return batches


def run_epoch(batches, model, optimizer, device, steps: int) -> tuple[float, float]:
    """Wall time of ``steps`` training steps, and the part spent waiting for batches."""
    synchronize(device)
    waited, start = 0.0, time.perf_counter()
    iterator = iter(batches)
    for _ in range(steps):
        asked = time.perf_counter()
        images, labels = next(iterator)
        waited += time.perf_counter() - asked
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    synchronize(device)
    return time.perf_counter() - start, waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--depths", default="1,2", help="DataPrefetcher depths to compare")
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    count = args.batch_size * args.steps
    pixels = 3 * args.image_size**2 * args.batch_size
    variants = {
        "(a) usual loop": (True, usual_batches, pixels * 4),
        "(b) apex data_prefetcher": (False, apex_batches, pixels),
    }
    for depth in (int(d) for d in args.depths.split(",")):
        variants[f"(c) fastload DataPrefetcher, depth {depth}"] = (
            False,
            fastload_batches(depth),
            pixels,
        )
    rows = []
    for name, (normalise_on_cpu, feed, image_bytes) in variants.items():
        loader = FastLoader(
            InMemoryImages(count, args.image_size, normalise_on_cpu), batch_size=args.batch_size
        )
        torch.manual_seed(0)
        model = small_convnet().to(device).to(memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        run_epoch(feed(loader, device), model, optimizer, device, args.steps)  # warm-up
        epochs = [
            run_epoch(feed(loader, device), model, optimizer, device, args.steps)
            for _ in range(args.repeats)
        ]
        seconds = Measurement(tuple(total for total, _ in epochs))
        wait = sorted(waited / total for total, waited in epochs)[len(epochs) // 2]
        rows.append(
            Row(name, seconds, items=args.steps, extra={
                "step ms": f"{1000 * seconds.median / args.steps:.1f}",
                "data wait": f"{100 * wait:.1f}%",
                "MB copied/batch": f"{(image_bytes + 8 * args.batch_size) / 2**20:.2f}",
            })
        )  # fmt: skip
    fallback = "" if device.type == "cuda" else ": CPU fallback, no GPU figure"
    print(f"device: {device_name()}{fallback}")
    result = report(
        "prefetch",
        rows,
        baseline="(a) usual loop",
        unit="steps",
        settings=vars(args) | {"device": str(device), "num_workers": loader.num_workers},
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
