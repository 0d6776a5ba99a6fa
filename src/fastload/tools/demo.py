"""``fastload demo``: two loaders timed alone (no model), then a diagnosed training loop, on a
generated image folder, no download needed."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from fastload.loader import FastLoader, auto_num_workers
from fastload.system import default_device
from fastload.testing.synthetic import make_image_folder
from fastload.tools.measure import Measurement, format_table, measure

if TYPE_CHECKING:
    from torchvision.datasets import ImageFolder

    from fastload.prefetch import DataPrefetcher
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


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLASSIC = "classic: torchvision ImageFolder + PIL + DataLoader"
HEADLINE = (
    "The same comparison over 1,000 such JPEGs, 2 workers, batch 64, as measured on the "
    "project's 2-core machine: the README's results table (benchmarks: cpu/peers). A small "
    "folder's epochs are short, so the ratio here moves more between runs.\n"
)
FASTLOAD = "fastload: ImageFolder + FastLoader + DataPrefetcher"


def _imagefolder(root: Path, image_size: int, *, jitter: bool = False) -> ImageFolder:
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    # The usual torchvision recipe: augment the PIL image, then a normalised float tensor.
    steps = [v2.RandomResizedCrop(image_size), v2.RandomHorizontalFlip()]
    steps += [v2.ColorJitter(0.4, 0.4)] if jitter else []
    steps += [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    return ImageFolder(str(root), transform=v2.Compose(steps))


def _classic(root: Path, image_size: int, batch_size: int, workers: int, device: torch.device,
             *, jitter: bool = False) -> Iterable[Any]:  # fmt: skip
    """The usual pipeline (the README's "before", its model left out): each batch made in
    the workers, then moved to ``device``."""
    cuda = device.type == "cuda"
    loader = DataLoader(
        _imagefolder(root, image_size, jitter=jitter), batch_size=batch_size, shuffle=True,
        num_workers=workers, pin_memory=cuda, persistent_workers=workers > 0,
    )  # fmt: skip

    class ToDevice:
        def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for images, labels in loader:
                yield images.to(device, non_blocking=cuda), labels.to(device, non_blocking=cuda)

    return ToDevice()


def _fastload(root: Path, image_size: int, batch_size: int, workers: int, device: torch.device,
              *, jitter: bool = False) -> DataPrefetcher:  # fmt: skip
    """fastload's pipeline (the README's "after", its model left out): the workers crop
    uint8 images; the rest on ``device``."""
    from torch import nn
    from torchvision.transforms import v2

    from fastload import gpu
    from fastload.collate import uint8_collate
    from fastload.datasets.folder import ImageFolder
    from fastload.prefetch import DataPrefetcher
    from fastload.transforms import RandomResizedCrop

    crop = v2.Compose([RandomResizedCrop(image_size), v2.RandomHorizontalFlip()])
    loader: FastLoader[Any] = FastLoader(
        ImageFolder(root, transform=crop), batch_size=batch_size, shuffle=True,
        num_workers=workers, collate_fn=uint8_collate,
    )  # fmt: skip
    augment = nn.Sequential(gpu.ColorJitter(0.4, 0.4)) if jitter else None
    return DataPrefetcher(loader, device, transform=augment, mean=MEAN, std=STD)


def _one_epoch(batches: Iterable[Any]) -> None:
    for _images, _labels in batches:
        pass


def compare_loaders(
    root: Path,
    *,
    batch_size: int = 32,
    image_size: int = 224,
    repeats: int = 3,
    device: torch.device | None = None,
) -> list[LoaderRun]:
    """Epoch time of two loaders alone, no model, from the same JPEG files to
    normalised batches on ``device``, with the same number of workers (FastLoader's
    choice): torchvision's ImageFolder (PIL decode, crop, flip, normalise) in a
    DataLoader, against fastload's ImageFolder (OpenCV, crop-aware) in a FastLoader,
    normalised by a DataPrefetcher. With CUDA, each again with ColorJitter: in the
    workers, against ``fastload.gpu`` on the device.

    The first epoch of each is a warm-up (workers start); then they take turns.
    """
    device = device or default_device()
    workers = auto_num_workers()  # what FastLoader picks for a folder of files
    settings = f"{workers} workers, to {device.type}"
    made = {
        CLASSIC: _classic(root, image_size, batch_size, workers, device),
        FASTLOAD: _fastload(root, image_size, batch_size, workers, device),
    }
    if device.type == "cuda":
        made[CLASSIC + ", ColorJitter in the workers"] = _classic(
            root, image_size, batch_size, workers, device, jitter=True
        )
        made[FASTLOAD + ", gpu.ColorJitter"] = _fastload(
            root, image_size, batch_size, workers, device, jitter=True
        )
    for batches in made.values():  # warm-up: the workers start here
        _one_epoch(batches)
    seconds: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(repeats):  # interleaved: a noisy minute costs each alike
        for name, batches in made.items():
            seconds[name] += measure(partial(_one_epoch, batches), repeats=1, warmup=0).seconds
    count = len(_imagefolder(root, image_size))
    runs = [LoaderRun(name, Measurement(tuple(seconds[name])), count, settings) for name in made]
    made.clear()
    gc.collect()  # the loaders' persistent workers end here, not during what comes next
    return runs


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
    from fastload.tools.diagnostics import classifier_step, diagnose

    prefetcher = _fastload(root, 64, 16, auto_num_workers(), default_device())
    classes = len([folder for folder in root.iterdir() if folder.is_dir()])
    step = classifier_step("resnet18", classes, prefetcher.device)
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
        say(
            f"1. The loaders alone, no model: {count} JPEGs of 500x375 to normalised 224 px "
            f"batches ({device}), {repeats} epoch{'s' * (repeats != 1)} each after a warm-up: "
            "measuring..."
        )
        say(f"\n{loader_table(compare_loaders(root, repeats=repeats))}\n")
        say(HEADLINE)
        say("2. fastload.diagnose on a ResNet-18 training loop over the same images "
            "(FastLoader + DataPrefetcher, 64 px): measuring...")  # fmt: skip
        report = diagnose_small_training(root)
        say(f"\n{report}")
    if plot is not None and report.timeline is not None:
        from fastload.tools.plots import plot_timeline

        written = plot_timeline(report.timeline, plot, title="fastload demo: ResNet-18 loop")
        say(f"\nwrote {written}")
