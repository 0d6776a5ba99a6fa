"""Hugging Face ``datasets``: its usual image recipe vs ``fastload.datasets.from_hf``, and
cheap numeric rows through DataLoader and FastLoader.

Images: the same generated 500x375 JPEGs as a ``datasets`` set saved to disk and loaded
back (memory-mapped, bytes embedded, as a set from the Hub is). HF's recipe decodes each
image with PIL in ``set_transform`` and augments it with torchvision v2
(RandomResizedCrop 224, flip, ToImage, ToDtype, Normalize) under a DataLoader; fastload
reads the batch's encoded bytes in one Arrow read, decodes and crops them with
``DecodeRandomResizedCrop`` (uint8 out) under FastLoader, and a ``DataPrefetcher`` on
the CPU normalises as it would on the GPU: both hand over the same float32 batch.
Numeric rows: a few columns ``.with_format("torch")``, DataLoader vs FastLoader vs
FastLoader(seed=0). Rounds interleaved, medians after a warm-up round; CPU ms per item
(this process and its workers).

Usage:
    python benchmarks/hf_datasets.py [--images 300] [--rounds 3] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, interleaved, plot, report, results_folder
from benchmarks.lib.data import DATA
from fastload import DataPrefetcher, FastLoader, make_image_folder
from fastload.collate import uint8_collate
from fastload.datasets import from_hf
from fastload.prefetch import IMAGENET_MEAN, IMAGENET_STD
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement
from fastload.transforms import DecodeRandomResizedCrop

BASELINE, NUMERIC_BASELINE = "HF recipe: set_transform (PIL + v2), DataLoader", "DataLoader"


def timed(run: Callable[[], int]) -> Callable[[], tuple[float, float, int]]:
    """``run`` (returning the items it loaded) with its wall and CPU seconds, workers'
    included (they are joined by the end of the epoch)."""

    def wrapper() -> tuple[float, float, int]:
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        items = run()
        return time.perf_counter() - start, cpu_seconds_with_workers() - cpu, items

    return wrapper


def epoch(loader: Any, key: str | int) -> Callable[[], int]:
    def run() -> int:
        return sum(len(batch[key]) for batch in loader)

    return run


def hf_image_set(images: int, work: Path) -> Any:
    import datasets

    folder = make_image_folder(DATA / f"jpeg-{images}", num_classes=10,
                               images_per_class=images // 10)  # fmt: skip
    paths = sorted(folder.glob("*/*.jpg"))
    rows = {"image": [p.read_bytes() for p in paths],
            "label": [int(p.parent.name[-2:]) for p in paths]}  # fmt: skip
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(work / "images"))
    return datasets.load_from_disk(str(work / "images"))


def hf_recipe(dataset: Any) -> Any:
    """What the Hub's image-classification guides do: PIL decode in ``set_transform``."""
    augment = v2.Compose([
        v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])  # fmt: skip

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        pixels = [augment(image.convert("RGB")) for image in batch["image"]]
        return {"pixel_values": pixels, "label": batch["label"]}

    dataset = dataset.with_transform(transform)  # a copy: set_transform, not in place
    return dataset


def collate(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.stack([row["pixel_values"] for row in rows]),
            "label": torch.tensor([row["label"] for row in rows])}  # fmt: skip


def image_variants(dataset: Any, args: argparse.Namespace) -> dict[str, Callable[[], int]]:
    loader_options = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    baseline = DataLoader(hf_recipe(dataset), collate_fn=collate, **loader_options)
    crop = v2.Compose([DecodeRandomResizedCrop(224), v2.RandomHorizontalFlip()])
    ours = FastLoader(from_hf(dataset, transform=crop, decode=None), collate_fn=uint8_collate,
                      **loader_options)  # fmt: skip
    prefetcher = DataPrefetcher(ours, "cpu", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return {BASELINE: epoch(baseline, "pixel_values"),
            "from_hf + FastLoader, DataPrefetcher normalises": epoch(prefetcher, 0)}  # fmt: skip


def numeric_variants(args: argparse.Namespace) -> dict[str, Callable[[], int]]:
    import datasets

    generator = torch.Generator().manual_seed(0)
    columns = {name: torch.rand(args.rows, generator=generator).tolist() for name in "abc"}
    columns["label"] = list(range(args.rows))
    table = datasets.Dataset.from_dict(columns).with_format("torch")
    options = dict(batch_size=args.numeric_batch_size, shuffle=True, num_workers=0)
    return {
        NUMERIC_BASELINE: epoch(DataLoader(table, **options), "label"),
        "FastLoader": epoch(FastLoader(table, **options), "label"),
        "FastLoader(seed=0)": epoch(FastLoader(table, seed=0, **options), "label"),
    }


def rows_of(results: dict[str, Any], unit: str, versus: str) -> list[Row]:
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, 0, versus=versus, note=runs))
            continue
        cpu = statistics.median(run[1] for run in runs) / runs[0][2]
        rows.append(Row(name, Measurement(tuple(run[0] for run in runs)), runs[0][2],
                        {f"CPU ms/{unit}": f"{1000 * cpu:.3f}"}, versus=versus))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--numeric-batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: does it run?")
    args = parser.parse_args()
    import datasets

    datasets.disable_progress_bars()
    if args.smoke:
        args.images, args.batch_size, args.rows, args.rounds = 20, 8, 500, 1

    work = Path(tempfile.mkdtemp(prefix="fastload-hf-"))
    try:
        variants = image_variants(hf_image_set(args.images, work), args)
        images = interleaved(
            {name: timed(run) for name, run in variants.items()}, rounds=args.rounds
        )
        numeric = interleaved(
            {name: timed(run) for name, run in numeric_variants(args).items()}, rounds=args.rounds
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = rows_of(images, "image", BASELINE) + rows_of(numeric, "row", NUMERIC_BASELINE)
    result = report(
        "hf_datasets", rows, baseline=BASELINE, unit="items", out=args.out,
        settings=vars(args) | {"image_size": "500x375", "crop": 224, "numeric_workers": 0},
    )  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
