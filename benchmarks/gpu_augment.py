"""Batch augmentation: torchvision per sample on CPU workers vs fastload.gpu on the batch.

The "Data augmentation on GPU" table of shared/seeds/000: images already decoded and
resized to 384x384 (uint8, in memory), then RandomCrop 224, HorizontalFlip and
ColorJitter(0.2, 0.2), for 1x to 4x the image count:

- torchvision per sample: the transforms in the Dataset, 2 DataLoader workers, then
  the batch to the device (the CPU recipe of the article);
- torchvision on the batch: the article's GPU recipe, an nn.Sequential of torchvision
  transforms on the batch, which draws ONE crop, flip and jitter for the whole batch;
- fastload.gpu on the batch: per-sample parameters, one vectorised call per module;
- Kornia on the batch (if it is installed): per-sample parameters, float input.

Without CUDA the batch variants run on the CPU as a correctness fallback: the table
then says where the time goes, not how fast a GPU is.

Usage:
    python benchmarks/gpu_augment.py [--count 512] [--batch-size 128] [--repeats 3] [--plot]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torchvision.transforms import v2

from common import Row, device_name, plot, report
from fastload import FastLoader, gpu
from fastload.timing import measure

SIZE, CROP = 384, 224


class PerSample(Dataset):
    def __init__(self, images: torch.Tensor, transform) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(self.images[index])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_sample_epoch(images, batch_size, device):
    transform = v2.Compose(
        [v2.RandomCrop(CROP), v2.RandomHorizontalFlip(), v2.ColorJitter(0.2, 0.2)]
    )
    loader = DataLoader(PerSample(images, transform), batch_size=batch_size, num_workers=2)

    def run():
        for batch in loader:
            batch.to(device, non_blocking=True)
        synchronize(device)

    return run


def batch_epoch(images, batch_size, device, augment: nn.Module, *, as_float: bool = False):
    loader = FastLoader(TensorDataset(images), batch_size=batch_size)

    def run():
        for (batch,) in loader:
            batch = batch.to(device, non_blocking=True)
            if as_float:
                batch = batch.float().div_(255)
            augment(batch)
        synchronize(device)

    return run


def kornia_augment() -> nn.Module | None:
    try:
        import kornia.augmentation as K
    except ImportError:
        return None
    return K.AugmentationSequential(
        K.RandomCrop((CROP, CROP)), K.RandomHorizontalFlip(), K.ColorJitter(0.2, 0.2)
    )


def where_the_time_goes(images: torch.Tensor, device: torch.device) -> str:
    """Per-module time of fastload.gpu on one batch, to explain the CPU fallback."""
    batch = images[:128].to(device)
    lines = []
    for module in (gpu.RandomCrop(CROP), gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.2, 0.2)):
        module(batch)  # warm-up
        synchronize(device)
        start = time.perf_counter()
        out = module(batch)
        synchronize(device)
        lines.append(f"{type(module).__name__} {1000 * (time.perf_counter() - start):.1f} ms")
        batch = out if out.shape[-1] == CROP else batch
    return ", ".join(lines) + " (128 images)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=512, help="images at 1x")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    generator = torch.Generator().manual_seed(0)
    base = torch.randint(
        0, 256, (args.count, 3, SIZE, SIZE), dtype=torch.uint8, generator=generator
    )
    ours = nn.Sequential(
        gpu.RandomCrop(CROP), gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.2, 0.2)
    )
    torchvision_batch = nn.Sequential(
        v2.RandomCrop(CROP), v2.RandomHorizontalFlip(), v2.ColorJitter(0.2, 0.2)
    )
    kornia = kornia_augment()

    rows = []
    for multiple in range(1, 5):
        images = base.repeat(multiple, 1, 1, 1)
        count = len(images)
        baseline = f"{multiple}x: torchvision per sample, 2 workers"
        variants = {
            baseline: per_sample_epoch(images, args.batch_size, device),
            f"{multiple}x: torchvision on the batch (one crop per batch)": batch_epoch(
                images, args.batch_size, device, torchvision_batch
            ),
            f"{multiple}x: fastload.gpu on the batch": batch_epoch(
                images, args.batch_size, device, ours
            ),
        }
        if kornia is not None:
            variants[f"{multiple}x: Kornia on the batch"] = batch_epoch(
                images, args.batch_size, device, kornia.to(device), as_float=True
            )
        for name, run in variants.items():
            rows.append(Row(name, measure(run, repeats=args.repeats), count, versus=baseline))
    where = where_the_time_goes(base, device)
    print(
        f"device: {device_name()}"
        + ("" if device.type == "cuda" else ": CPU fallback, no GPU figure")
    )
    print(f"fastload.gpu per module: {where}")
    result = report(
        "gpu_augment",
        rows,
        baseline=rows[0].name,
        unit="images",
        settings=vars(args)
        | {"device": str(device), "kornia": kornia is not None, "where_the_time_goes": where},
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
