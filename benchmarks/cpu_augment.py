"""CPU augmentation: torchvision on PIL vs albumentations on OpenCV vs fastload's path.

Reproduces the table "Albumentations vs torchvision" of shared/seeds/000 on the
generated JPEG folder, in one run: the same augmentation (Resize 384x384, RandomCrop
256, HorizontalFlip, brightness/contrast with p=0.2), one epoch per measurement, for
batch sizes 1, 32, 128 and 1 or 2 workers.

- torchvision:    torchvision ImageFolder (PIL decode) + torchvision.transforms, a
                  uint8 tensor at the end; DataLoader.
- albumentations: cv2.imread + the albumentations recipe ending in ToTensorV2; DataLoader.
- fastload:       fastload.ImageFolder (OpenCV decode, reduced-size decode where the
                  target allows it) + fastload.transforms.Albumentations + uint8_collate;
                  FastLoader with the same number of workers.

A/T and F/T are times relative to torchvision's (the article measured A/T ~ 70%).
A second table compares full JPEG decoding with decoding at 1/2 and 1/4 scale.

Usage:
    python benchmarks/cpu_augment.py [--images 1000] [--repeats 3] [--plot]
"""

from __future__ import annotations

import argparse

import albumentations as A
import cv2
import torchvision
from albumentations.pytorch import ToTensorV2
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms as T

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, plot, report
from benchmarks.lib.data import jpeg_folder
from fastload import FastLoader, ImageFolder
from fastload.collate import uint8_collate
from fastload.decode.opencv import decode_image
from fastload.tools.measure import format_table, measure
from fastload.transforms import Albumentations

RESIZE, CROP = 384, 256


def albumentations_ops() -> list:
    return [
        A.Resize(RESIZE, RESIZE),
        A.RandomCrop(CROP, CROP),
        A.HorizontalFlip(p=0.5),
        A.RandomBrightnessContrast(p=0.2),
    ]


class OpenCVFolder(Dataset):
    """The usual albumentations recipe: cv2.imread, BGR to RGB, then the transform."""

    def __init__(self, samples: list[tuple[str, int]], transform) -> None:
        self.samples, self.transform = samples, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        return self.transform(image=image)["image"], label


def loaders(root, count: int, batch_size: int, workers: int) -> dict[str, DataLoader]:
    subset = list(range(count))
    torchvision_data = torchvision.datasets.ImageFolder(
        str(root),
        transform=T.Compose([
            T.Resize((RESIZE, RESIZE)),
            T.RandomCrop(CROP),
            T.RandomHorizontalFlip(),
            T.RandomApply([T.ColorJitter(brightness=0.2, contrast=0.2)], p=0.2),
            T.PILToTensor(),
        ]),
    )  # fmt: skip
    albumentations_data = OpenCVFolder(
        torchvision_data.samples, A.Compose([*albumentations_ops(), ToTensorV2()])
    )
    fastload_data = ImageFolder(
        root, transform=Albumentations(A.Compose(albumentations_ops())), min_size=RESIZE
    )
    return {
        "torchvision": DataLoader(
            Subset(torchvision_data, subset), batch_size, num_workers=workers
        ),
        "albumentations": DataLoader(
            Subset(albumentations_data, subset), batch_size, num_workers=workers
        ),
        "fastload": FastLoader(
            Subset(fastload_data, subset),
            batch_size,
            num_workers=workers,
            collate_fn=uint8_collate,
        ),
    }


def epoch(loader) -> None:
    for _images, _labels in loader:
        pass


def decode_table(root, count: int, repeats: int) -> tuple[str, list[Row]]:
    files = sorted(root.rglob("*.jpg"))[:count]
    data = [path.read_bytes() for path in files]
    height, width = decode_image(data[0]).shape[:2]
    variants = {
        "full decode": None,
        "reduced 1/2": (height // 2, width // 2),
        "reduced 1/4": (height // 4, width // 4),
    }
    rows = []
    for name, min_size in variants.items():
        timing = measure(
            lambda m=min_size: [decode_image(d, min_size=m) for d in data], repeats=repeats
        )
        rows.append(Row(name, timing, len(data), versus="full decode"))
    base = rows[0].measurement.median
    table = format_table(
        ["decode", "median s", "images/s", "speed-up"],
        [
            [
                row.name,
                f"{row.measurement.median:.3f}",
                f"{row.per_second:,.0f}",
                f"{base / row.measurement.median:.2f}x",
            ]
            for row in rows
        ],
    )
    return table, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    root = jpeg_folder()
    rows, lines = [], []
    for workers in (1, 2):
        for batch_size in (1, 32, 128):
            config = f"BS={batch_size}, NW={workers}"
            seconds = {}
            for name, loader in loaders(root, args.images, batch_size, workers).items():
                timing = measure(lambda loader=loader: epoch(loader), repeats=args.repeats)
                seconds[name] = timing.median
                rows.append(
                    Row(f"{config}, {name}", timing, args.images, versus=f"{config}, torchvision")
                )
            a_t, f_t = (
                seconds["albumentations"] / seconds["torchvision"],
                seconds["fastload"] / seconds["torchvision"],
            )
            rows[-2].extra["time vs torchvision"] = f"{a_t:.0%}"
            rows[-1].extra["time vs torchvision"] = f"{f_t:.0%}"
            lines.append(
                [config, *(f"{seconds[n]:.2f}" for n in seconds), f"{a_t:.0%}", f"{f_t:.0%}"]
            )
    print(
        format_table(
            ["loader", "torchvision s", "albumentations s", "fastload s", "A / T", "F / T"], lines
        )
    )
    print()
    table, decode_rows = decode_table(root, args.images, args.repeats)
    print(table)
    print()
    result = report(
        "cpu_augment",
        rows + decode_rows,
        baseline="BS=1, NW=1, torchvision",
        unit="images",
        settings=vars(args) | {"resize": RESIZE, "crop": CROP, "image": "JPEG 500x375"},
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
