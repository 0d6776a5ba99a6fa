"""Inside the frameworks: a small training run under PyTorch Lightning and under Hugging
Face Accelerate, each framework's usual data path against fastload's integration, and
fastload in a hand-written loop, on the same model and data, in one run.

Every variant trains ``--model`` (a small CNN, or a torchvision model) with SGD on the
1000 photo-like 500x375 JPEGs of ``benchmarks/lib/data.py``, batches of ``--batch-size`` at
``--image-size`` px: RandomResizedCrop (antialiased where it shrinks), a random flip and
ImageNet normalisation, ``--workers`` worker processes.

- the usual data path: torchvision ImageFolder (PIL) + v2 transforms per sample +
  DataLoader (persistent workers), returned by ``train_dataloader()`` (Lightning) or
  given to ``accelerator.prepare`` (Accelerate);
- fastload: ImageFolder (OpenCV) + ``fastload.transforms.RandomResizedCrop`` in
  FastLoader's workers, uint8 batches; DataPrefetcher flips per sample (keyed by
  ``seed``) and normalises on the device, returned by ``train_dataloader()`` or fed next
  to the prepared model;
- fastload's own loop: the same DataPrefetcher in a plain PyTorch loop (the goal: the
  Lightning integration at least 0.95x of it).

Each variant runs in its own process; rounds are interleaved (every variant once, then
again); each process trains ``--epochs`` epochs and the first is a warm-up. The table
holds medians over the timed epochs: images/s, the ratio to the framework's usual path,
the share of fastload's own loop, CPU ms per image (process and workers).

Usage:
    python benchmarks/frameworks.py [--epochs 3] [--rounds 3] [--workers 2]
        [--batch-size 64] [--image-size 112] [--model small] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    budget_argument,
    describe,
    plot,
    report,
    results_folder,
)
from benchmarks.lib.data import jpeg_folder
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
OWN_LOOP = "fastload, its own loop"
VARIANTS = {  # name -> (framework, data path)
    OWN_LOOP: ("none", "fastload"),
    "Lightning: DataLoader + torchvision v2": ("lightning", "usual"),
    "Lightning: fastload (DataPrefetcher from train_dataloader)": ("lightning", "fastload"),
    "Accelerate: DataLoader + torchvision v2 (prepared)": ("accelerate", "usual"),
    "Accelerate: fastload (DataPrefetcher on accelerator.device)": ("accelerate", "fastload"),
}


def make_model(name: str) -> nn.Module:
    if name == "small":  # the loader's share of the step stays large on a CPU
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip
    import torchvision

    return getattr(torchvision.models, name)(num_classes=10)


def usual_loader(args):  # type: ignore[no-untyped-def]
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    transform = v2.Compose([
        v2.ToImage(), v2.RandomResizedCrop(args.image_size, antialias=True),
        v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
    ])  # fmt: skip
    dataset = torchvision.datasets.ImageFolder(str(args.data), transform)
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                      num_workers=args.workers, persistent_workers=args.workers > 0)  # fmt: skip


def fastload_batches(args, device: torch.device):  # type: ignore[no-untyped-def]
    from fastload import DataPrefetcher, FastLoader, ImageFolder, gpu
    from fastload.collate import uint8_collate
    from fastload.transforms import RandomResizedCrop

    dataset = ImageFolder(args.data, transform=RandomResizedCrop(args.image_size))
    loader = FastLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        num_workers=args.workers, collate_fn=uint8_collate, seed=0)  # fmt: skip
    return DataPrefetcher(loader, device, mean=MEAN, std=STD,
                          transform=gpu.RandomHorizontalFlip())  # fmt: skip


class EpochClock:
    """Seconds and CPU seconds (the process and its workers) of each epoch."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def start(self) -> None:
        self.wall, self.cpu = time.perf_counter(), cpu_seconds_with_workers()

    def stop(self, images: int) -> None:
        seconds, cpu = time.perf_counter() - self.wall, cpu_seconds_with_workers() - self.cpu
        self.epochs.append({"seconds": seconds, "cpu": cpu, "images": images})


def own_loop(args, clock: EpochClock) -> None:  # type: ignore[no-untyped-def]
    device = torch.device("cpu")
    model = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = fastload_batches(args, device)
    for _ in range(args.epochs):
        clock.start()
        for images, labels in batches:
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        clock.stop(len(batches) * args.batch_size)


def lightning_run(args, clock: EpochClock) -> None:  # type: ignore[no-untyped-def]
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model(args.model)

        def train_dataloader(self):  # type: ignore[no-untyped-def]
            if args.path == "usual":
                return usual_loader(args)
            return fastload_batches(args, self.trainer.strategy.root_device)

        def training_step(self, batch, batch_index):  # type: ignore[no-untyped-def]
            images, labels = batch
            return nn.functional.cross_entropy(self.model(images), labels)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def on_train_epoch_start(self) -> None:
            clock.start()

        def on_train_epoch_end(self) -> None:
            clock.stop(len(self.trainer.train_dataloader) * args.batch_size)

    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=args.epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)  # fmt: skip
    trainer.fit(Classifier())


def accelerate_run(args, clock: EpochClock) -> None:  # type: ignore[no-untyped-def]
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.path == "usual":
        model, optimizer, batches = accelerator.prepare(model, optimizer, usual_loader(args))
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
        batches = fastload_batches(args, accelerator.device)
    for _ in range(args.epochs):
        clock.start()
        for images, labels in batches:
            accelerator.backward(nn.functional.cross_entropy(model(images), labels))
            optimizer.step()
            optimizer.zero_grad()
        clock.stop(len(batches) * args.batch_size)


def run_variant(args) -> None:  # type: ignore[no-untyped-def]
    """In the variant's own process: train, print each epoch's figures as JSON lines."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    clock = EpochClock()
    {"none": own_loop, "lightning": lightning_run, "accelerate": accelerate_run}[args.framework](
        args, clock
    )
    for epoch in clock.epochs:
        print(json.dumps(epoch))


def measure(args, name: str, timeout: float) -> list[dict[str, float]]:  # type: ignore[no-untyped-def]
    framework, path = VARIANTS[name]
    command = [sys.executable, __file__, "--variant", framework, path, "--data", str(args.data),
               "--epochs", str(args.epochs), "--workers", str(args.workers),
               "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
               "--model", args.model]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
    epochs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return epochs[1:]  # the first: the warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="per process, the first untimed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--model", default="small", help="small, or a torchvision model")
    parser.add_argument("--data", type=Path, default=None, help="an image folder")
    parser.add_argument("--variant", nargs=2, metavar=("FRAMEWORK", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    budget_argument(parser)
    args = parser.parse_args()
    if args.variant:
        args.framework, args.path = args.variant
        run_variant(args)
        return
    if args.smoke:
        args.epochs, args.rounds, args.batch_size, args.image_size = 2, 1, 8, 32
    budget = Budget(args.budget_s)
    args.data = args.data or jpeg_folder(images_per_class=2 if args.smoke else 100)
    epochs: dict[str, list[dict[str, float]] | str] = {name: [] for name in VARIANTS}
    for round_index in range(args.rounds):
        for name in VARIANTS:
            if isinstance(epochs[name], str):
                continue
            if not budget.allows(10, f"round {round_index + 1} of {args.rounds}"):
                break
            try:
                epochs[name] += measure(args, name, timeout=min(600, budget.left()))  # type: ignore[operator]
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                epochs[name] = describe(error)
    result = write_report(args, epochs, budget)
    if args.plot:
        plot(result)


def write_report(args, epochs: dict, budget: Budget) -> Path:  # type: ignore[no-untyped-def]
    def rate(measured: list[dict[str, float]]) -> float:
        return statistics.median(e["images"] / e["seconds"] for e in measured)

    own = epochs[OWN_LOOP]
    rows = []
    for name, measured in epochs.items():
        framework = VARIANTS[name][0]
        usual = next((n for n, (f, p) in VARIANTS.items() if f == framework and p == "usual"), None)
        if isinstance(measured, str) or not measured:
            rows.append(Row(name, None, 1, versus=usual, note=measured or "not run"))
            continue
        seconds = tuple(e["seconds"] / e["images"] for e in measured)  # per image
        cpu = statistics.median(e["cpu"] / e["images"] for e in measured)
        share = "-" if isinstance(own, str) or not own else f"{rate(measured) / rate(own):.2f}x"
        extra = {"of fastload's own loop": share, "CPU ms/image": f"{1000 * cpu:.2f}"}
        rows.append(Row(name, Measurement(seconds), 1, extra, versus=usual))
    return report(
        "frameworks", rows, baseline=OWN_LOOP, unit="images",
        settings={key: value for key, value in vars(args).items()
                  if key not in ("out", "variant", "data")}
        | {"data": "1000 photo-like JPEG 500x375" if not args.smoke else "smoke"},
        out=args.out, cut_short=budget.cut_short,
    )  # fmt: skip


if __name__ == "__main__":
    main()
