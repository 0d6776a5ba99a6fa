"""End to end: the plain torchvision pipeline vs fastload's, files to a normalised batch
on the device, alone and (with a GPU, or --with-model) with a ResNet-18 training step.

Each variant runs examples/train_classifier.py in its own process for several epochs
on the generated JPEGs; the table holds the median over the epochs after the first.

- baseline: torchvision ImageFolder, PIL transforms (RandomResizedCrop, flip,
  ColorJitter 0.2/0.2/0.2, ToTensor, Normalize), DataLoader with 2 workers (and with its
  defaults, 0 workers), .to(device) in the loop;
- fastload: FastLoader + OpenCV decode + the same augmentation (in the workers on uint8
  without a GPU, per sample on the GPU with one) + DataPrefetcher, from the folder and
  from an LMDB file; with CUDA also GPUDecoder.

Usage:
    python benchmarks/end_to_end.py [--epochs 4] [--with-model] [--plot]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from common import Row, device_name, plot, report
from data import jpeg_folder
from fastload import write_lmdb
from fastload.timing import Measurement

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_classifier.py"
DATABASE = Path(__file__).resolve().parent / ".data" / "train.lmdb"


def run(data: Path, options: list[str], epochs: int) -> list[dict]:
    command = [sys.executable, str(EXAMPLE), str(data), "--epochs", str(epochs), "--json", *options]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument(
        "--with-model", action="store_true", help="also time a ResNet-18 step on a CPU"
    )
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    folder = jpeg_folder()
    if not DATABASE.exists():
        write_lmdb(folder, DATABASE, progress=False)
    cuda = torch.cuda.is_available()
    common = ["--batch-size", str(args.batch_size), "--image-size", str(args.image_size)]
    variants = {
        "baseline: torchvision + DataLoader, 0 workers": (folder, ["--baseline", "--workers", "0"]),
        "baseline: torchvision + DataLoader, 2 workers": (folder, ["--baseline", "--workers", "2"]),
        "fastload, image folder": (folder, []),
        "fastload, LMDB": (DATABASE, []),
    }
    if cuda:
        variants["fastload, LMDB, GPUDecoder"] = (DATABASE, ["--decode", "gpu"])
    models = ["none", "resnet18"] if cuda or args.with_model else ["none"]

    rows = []
    for model in models:
        group = []
        for name, (data, options) in variants.items():
            label = f"{name} (pipeline alone)" if model == "none" else f"{name} + ResNet-18 step"
            epochs = run(data, [*common, "--model", model, *options], args.epochs)[1:]
            # One "item" per image: the median seconds per image gives images/s.
            seconds = tuple(1.0 / epoch["images_per_second"] for epoch in epochs)
            waits = [e["data_wait_fraction"] for e in epochs if e["data_wait_fraction"] is not None]
            cpu = statistics.median(e["cpu_seconds_per_image"] for e in epochs)
            extra = {
                "CPU ms/image": f"{1000 * cpu:.2f}",
                "data wait": f"{100 * statistics.median(waits):.1f}%" if waits else "-",
            }
            group.append(Row(label, Measurement(seconds), 1, extra))
        reference = next(row.name for row in group if "2 workers" in row.name)
        for row in group:
            row.versus = reference
        rows += group
    print(f"device: {device_name()}" + ("" if cuda else ": no GPU, the pipeline runs on the CPU"))
    result = report(
        "end_to_end",
        rows,
        baseline=rows[1].name,
        unit="images",
        settings=vars(args) | {"device": "cuda" if cuda else "cpu", "images": "1000 JPEG 500x375"},
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
