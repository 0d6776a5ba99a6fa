"""``fastload demo``: a before/after table on a generated image folder, no download needed."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from fastload.loader import FastLoader
from fastload.tools.measure import Measurement, format_table, measure
from fastload.tools.synthetic import make_image_folder

if TYPE_CHECKING:
    from torchvision.datasets import ImageFolder

    from fastload.tools.diagnostics import DiagnoseReport

__all__ = ["LoaderRun", "compare_loaders", "run_demo"]


@dataclass(frozen=True)
class LoaderRun:
    name: str
    measurement: Measurement
    images: int
    settings: str

    @property
    def images_per_second(self) -> float:
        return self.images / self.measurement.median


def _imagefolder(root: Path, image_size: int) -> ImageFolder:
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    # The usual torchvision recipe: augment the PIL image, then a uint8 tensor.
    transform = v2.Compose(
        [v2.RandomResizedCrop(image_size), v2.RandomHorizontalFlip(), v2.PILToTensor()]
    )
    return ImageFolder(str(root), transform=transform)


def _one_epoch(loader: DataLoader[Any]) -> None:
    for _images, _labels in loader:
        pass


def compare_loaders(
    root: Path, *, batch_size: int = 32, image_size: int = 224, repeats: int = 3
) -> list[LoaderRun]:
    """Epoch time of DataLoader and of FastLoader, each with its own defaults, on the
    same torchvision ImageFolder and transform (PIL decode, RandomResizedCrop, flip,
    uint8 tensor).

    The first epoch of each is a warm-up (it also starts FastLoader's persistent workers);
    then the loaders take turns, epoch by epoch.
    """
    dataset = _imagefolder(root, image_size)
    loaders = {
        "DataLoader": DataLoader(dataset, batch_size=batch_size, shuffle=True),
        "FastLoader": FastLoader(dataset, batch_size=batch_size, shuffle=True),
    }
    for loader in loaders.values():  # warm-up: FastLoader's workers start here
        _one_epoch(loader)
    seconds: dict[str, list[float]] = {name: [] for name in loaders}
    for _ in range(repeats):  # interleaved: a noisy minute costs both alike
        for name, loader in loaders.items():
            seconds[name] += measure(partial(_one_epoch, loader), repeats=1, warmup=0).seconds
    return [
        LoaderRun(name, Measurement(tuple(seconds[name])), len(dataset),
                  f"num_workers={loader.num_workers}, pin_memory={loader.pin_memory}")
        for name, loader in loaders.items()
    ]  # fmt: skip


def loader_table(runs: list[LoaderRun]) -> str:
    base = runs[0].measurement.median
    return format_table(
        ["loader", "settings", "epoch s (median)", "images/s", "speed-up"],
        [
            [
                run.name,
                run.settings,
                f"{run.measurement.median:.2f}",
                f"{run.images_per_second:,.0f}",
                f"{base / run.measurement.median:.2f}x",
            ]
            for run in runs
        ],
    )


def diagnose_small_training(root: Path, *, batches: int = 6) -> DiagnoseReport:
    """``fastload.diagnose`` on a ResNet-18 trained on ``root`` at 64 px: the report a
    user gets for their own loop."""
    from fastload.prefetch import IMAGENET_MEAN, IMAGENET_STD, DataPrefetcher
    from fastload.tools.diagnostics import classifier_step, diagnose

    dataset = _imagefolder(root, 64)
    loader: FastLoader[Any] = FastLoader(dataset, batch_size=16, shuffle=True)
    prefetcher = DataPrefetcher(loader, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    step = classifier_step("resnet18", len(dataset.classes), prefetcher.device)
    return diagnose(prefetcher, step, batches=batches, warmup=2)


def run_demo(
    *,
    images_per_class: int = 16,
    num_classes: int = 8,
    repeats: int = 3,
    plot: Path | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Generate a small photo-like JPEG folder in a temporary directory, compare the
    loaders, then diagnose a small training loop on it; ``say`` each part as soon as it
    is measured, and draw the loop's wait/compute timeline to ``plot``."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    count = num_classes * images_per_class
    with tempfile.TemporaryDirectory(prefix="fastload-demo-") as tmp:
        root = make_image_folder(
            Path(tmp) / "images",
            num_classes=num_classes,
            images_per_class=images_per_class,
            progress=True,
        )
        say(f"1. DataLoader vs FastLoader, {count} JPEGs of 500x375 ({device}), "
            f"{repeats} epochs each after a warm-up: measuring...")  # fmt: skip
        say(f"\n{loader_table(compare_loaders(root, repeats=repeats))}\n")
        say("2. fastload.diagnose on a ResNet-18 training loop over the same images "
            "(FastLoader + DataPrefetcher, 64 px): measuring...")  # fmt: skip
        report = diagnose_small_training(root)
        say(f"\n{report}")
    if plot is not None and report.timeline is not None:
        from fastload.tools.plots import plot_timeline

        written = plot_timeline(report.timeline, plot, title="fastload demo: ResNet-18 loop")
        say(f"\nwrote {written}")
