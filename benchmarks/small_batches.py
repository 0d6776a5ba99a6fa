"""Small batches: images/s, batches/s and CPU per image at batch sizes 1 to 64,
DataLoader vs FastLoader vs FastLoader + DataPrefetcher.

Three sources of the same number of samples: a folder of small JPEGs (96x96, 10
classes), its LMDB copy (``fastload.write_lmdb``), and uint8 tensors of 3x32x32 in memory
(a ``TensorDataset``). For each, at each batch size: torchvision's way (``ImageFolder``
with PIL and ``PILToTensor`` for the folder, the same dataset otherwise) under a
``DataLoader``; the fastload dataset (``fastload.ImageFolder`` / ``LMDBDataset`` with
``decode="tensor"``, the same ``TensorDataset``) under a ``FastLoader``; and that
``FastLoader`` wrapped in a ``DataPrefetcher`` (``--device``, the CPU by default: it
hands out float32). Every loader shuffles, with the same workers (2), kept across
epochs, and otherwise its own defaults. A timed run is as many whole epochs as hand out
at least ``--min-batches`` batches, so that a large batch size is timed over as many
batches as a small one. The variants of a source take turns run by run (interleaved:
every variant once, then again), after a warm-up run each; medians. CPU ms per image
count this process and its workers; "of batch-64 rate" is a variant's images/s over its
own at batch size 64, on the same source.

With ``--step srcnn`` every batch also trains a step of SRCNN (Dong et al.'s 9-5-5
super-resolution network) on ``--device``, restoring each image from its 2x-downscaled
copy: DataLoader's and FastLoader's batches are moved and converted to float there as a
training script does (``.to(device, non_blocking=True).float().div(255)``), the
prefetcher's come finished; "the step alone" steps on one batch already on the device,
the ceiling. The GPU check runs it at batch sizes 8 and 64 over the image folder.

Usage:
    python benchmarks/small_batches.py [--images 2000] [--rounds 5] [--plot] [--smoke]
        [--sources ...] [--batch-sizes 1 4 8 16 64] [--step srcnn --device cuda]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torchvision.transforms import PILToTensor

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    budget_argument,
    interleaved,
    pyplot,
    report,
    results_folder,
    save_figure,
)
from benchmarks.lib.data import DATA
from fastload import (
    DataPrefetcher,
    FastLoader,
    ImageFolder,
    LMDBDataset,
    make_image_folder,
    write_lmdb,
)
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

BATCH_SIZES = (1, 4, 8, 16, 64)
REFERENCE = 64  # the batch size each variant's rate at the others is a share of
LOADERS = ("DataLoader", "FastLoader", "FastLoader + DataPrefetcher")
BASELINE = LOADERS[0]
ALONE = "the step alone"  # with --step: the ceiling
IMAGE_SIZE = 96  # the JPEGs' width and height
SAMPLE_SHAPE = (3, 32, 32)  # an in-memory sample
CLASSES = 10
SOURCES = ("image folder", "LMDB", "in memory")


@dataclass(frozen=True)
class Source:
    """One kind of data: what DataLoader reads (torchvision's way) and what FastLoader
    reads (fastload's), the same samples."""

    name: str
    baseline: Dataset[Any]
    ours: Dataset[Any]


def sources(images: int) -> list[Source]:
    """The image folder (generated once under benchmarks/.data), its LMDB copy, and as
    many in-memory samples."""
    folder = make_image_folder(DATA / f"small-{IMAGE_SIZE}px-{images}", num_classes=CLASSES,
                               images_per_class=images // CLASSES,
                               size=(IMAGE_SIZE, IMAGE_SIZE))  # fmt: skip
    database = folder.with_suffix(".lmdb")
    if not database.exists():
        write_lmdb(folder, database, progress=False)
    generator = torch.Generator().manual_seed(0)
    count = CLASSES * (images // CLASSES)
    pixels = torch.randint(0, 256, (count, *SAMPLE_SHAPE), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    in_memory = TensorDataset(pixels, labels)
    return [
        Source("image folder",
               torchvision.datasets.ImageFolder(str(folder), transform=PILToTensor()),
               ImageFolder(folder, decode="tensor")),
        Source("LMDB", LMDBDataset(database, decode="tensor"),
               LMDBDataset(database, decode="tensor")),
        Source("in memory", in_memory, in_memory),
    ]  # fmt: skip


def name(source: str, batch_size: int, loader: str) -> str:
    return f"{source}, batch {batch_size}: {loader}"


def options(batch_size: int, args: argparse.Namespace) -> dict[str, Any]:
    """What every loader is given: the rest are its own defaults."""
    return dict(batch_size=batch_size, shuffle=True, num_workers=args.workers,
                persistent_workers=args.workers > 0)  # fmt: skip


def loaders(source: Source, batch_size: int, args: argparse.Namespace) -> dict[str, Iterable[Any]]:
    """The three loaders of one source and batch size, each with its own workers."""
    given = options(batch_size, args)
    return {
        "DataLoader": DataLoader(source.baseline, **given, pin_memory=args.device != "cpu"),
        "FastLoader": FastLoader(source.ours, **given),
        "FastLoader + DataPrefetcher": DataPrefetcher(FastLoader(source.ours, **given),
                                                      args.device),
    }  # fmt: skip


Step = Callable[[torch.Tensor], None]


def srcnn_step(device: torch.device, width: int = 64) -> Step:
    """One training step of SRCNN on a float image batch (0..1) on ``device``: restore the
    batch from its 2x-downscaled copy (mean squared error, SGD). ``width``: the first
    layer's channels (64 in the paper; ``--smoke`` takes 8)."""
    model = nn.Sequential(
        nn.Conv2d(3, width, 9, padding=4), nn.ReLU(inplace=True),
        nn.Conv2d(width, width // 2, 5, padding=2), nn.ReLU(inplace=True),
        nn.Conv2d(width // 2, 3, 5, padding=2),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step(images: torch.Tensor) -> None:
        low = functional.interpolate(functional.avg_pool2d(images, 2), scale_factor=2.0,
                                     mode="bilinear", align_corners=False)  # fmt: skip
        loss = functional.mse_loss(model(low), images)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def finished_on(device: torch.device, loader: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """What a training script does to a batch's images before its step: the prefetcher's
    come finished; the others are moved and converted."""
    if loader == "FastLoader + DataPrefetcher":
        return lambda images: images
    return lambda images: images.to(device, non_blocking=True).float().div_(255)


def timed(
    loader: Iterable[Any],
    epochs: int,
    step: Step | None = None,
    finish: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device: torch.device | None = None,
) -> Callable[[], tuple[float, float, int, int]]:
    """``epochs`` passes of ``loader`` (each batch's images ``finish``-ed and trained on
    with ``step``, if given): wall seconds, CPU seconds (this process and its workers),
    and the images and batches it handed out."""

    def run() -> tuple[float, float, int, int]:
        images = batches = 0
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        for _ in range(epochs):
            for batch in loader:
                images += len(batch[0])
                batches += 1
                if step is not None:
                    step(finish(batch[0]) if finish is not None else batch[0])
        synchronize(device)
        return time.perf_counter() - start, cpu_seconds_with_workers() - cpu, images, batches

    return run


def step_alone(
    source: Source, batch_size: int, batches: int, step: Step, device: torch.device
) -> Callable[[], tuple[float, float, int, int]]:
    """``step`` on one batch of ``source`` already on ``device``, ``batches`` times."""
    samples = len(source.ours)  # type: ignore[arg-type]
    first = torch.stack([source.ours[index % samples][0] for index in range(batch_size)])
    images = finished_on(device, BASELINE)(first)
    return timed([(images,)] * batches, 1, step, device=device)


def synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def epochs_per_run(samples: int, batch_size: int, min_batches: int, min_images: int) -> int:
    """The whole epochs that hand out at least ``min_batches`` batches and ``min_images``
    images (a run long enough that the machine's jitter is a small part of it)."""
    by_batches = math.ceil(min_batches / math.ceil(samples / batch_size))
    return max(by_batches, math.ceil(min_images / samples))


def measure_source(
    source: Source, args: argparse.Namespace, budget: Budget
) -> dict[str, list[tuple[float, float, int, int]] | str]:
    """Every loader at every batch size on one source, interleaved; the workers are let go
    before the next source's start."""
    samples = len(source.ours)  # type: ignore[arg-type]
    device = torch.device(args.device)
    step = srcnn_step(device, 8 if args.smoke else 64) if args.step == "srcnn" else None
    variants = {}
    for batch_size in args.batch_sizes:
        epochs = epochs_per_run(samples, batch_size, args.min_batches, args.min_images)
        for loader, iterable in loaders(source, batch_size, args).items():
            variants[name(source.name, batch_size, loader)] = timed(
                iterable, epochs, step, finished_on(device, loader), device
            )
        if step is not None:
            batches = epochs * math.ceil(samples / batch_size)
            variants[name(source.name, batch_size, ALONE)] = step_alone(
                source, batch_size, batches, step, device
            )
    results = interleaved(variants, rounds=args.rounds, budget=budget)
    del variants
    gc.collect()  # the loaders' persistent workers exit with their iterators
    return results


def rows_of(results: dict[str, list[tuple[float, float, int, int]] | str]) -> list[Row]:
    """A row per variant: images/s (the unit), batches/s, CPU ms per image, and the share
    of its own batch-64 rate; each compared with DataLoader's on its source and batch size."""
    rows: dict[str, Row] = {}
    for variant, runs in results.items():
        versus = f"{variant.rpartition(': ')[0]}: {BASELINE}"
        if isinstance(runs, str):
            rows[variant] = Row(variant, None, 0, versus=versus, note=runs)
            continue
        measurement = Measurement(tuple(run[0] for run in runs))
        images, batches = runs[0][2], runs[0][3]
        cpu = statistics.median(run[1] for run in runs)
        rows[variant] = Row(variant, measurement, images, {
            "batches/s": f"{batches / measurement.median:,.0f}",
            "CPU ms/image": f"{1000 * cpu / images:.3f}",
        }, versus=versus)  # fmt: skip
    for row in rows.values():
        source, _, loader = row.name.partition(", batch ")
        share = paired_ratio(row, rows.get(name(source, REFERENCE, loader.partition(": ")[2])))
        if share is not None:
            row.extra["of batch-64 rate"] = f"{100 * share:.0f} %"
    return list(rows.values())


def paired_ratio(row: Row | None, reference: Row | None) -> float | None:
    """The median over rounds of ``row``'s images/s over ``reference``'s in the same round:
    the machine is shared, and its speed drifts from one round to the next more than
    between two runs of one round."""
    if row is None or reference is None or not row.measurement or not reference.measurement:
        return None
    ratios = [
        (row.items / mine) / (reference.items / theirs)
        for mine, theirs in zip(
            row.measurement.seconds, reference.measurement.seconds, strict=False
        )
    ]  # (a budget may have cut one variant's rounds short: the rounds both ran)
    return statistics.median(ratios) if ratios else None


def goals(rows: list[Row]) -> list[dict[str, object]]:
    """The issue's goals, measured (rates paired round by round, :func:`paired_ratio`): at
    batch 8, fastload at least 90 % of its own batch-64 images/s and 2.5x DataLoader's; at
    batch 1 in memory, 3x DataLoader's batches/s."""
    by_name = {row.name: row for row in rows}

    def row(source: str, batch_size: int, loader: str) -> Row | None:
        return by_name.get(name(source, batch_size, loader))

    found = []
    for loader in LOADERS[1:]:
        for source in SOURCES:
            checks = [(f"batch 8 over its own batch {REFERENCE}", 0.9,
                       row(source, 8, loader), row(source, REFERENCE, loader)),
                      ("batch 8 over DataLoader's", 2.5,
                       row(source, 8, loader), row(source, 8, BASELINE))]  # fmt: skip
            if source == "in memory":
                checks.append(("batch 1 over DataLoader's", 3.0,
                               row(source, 1, loader), row(source, 1, BASELINE)))  # fmt: skip
            for what, target, mine, theirs in checks:
                ratio = paired_ratio(mine, theirs)
                if ratio is None:
                    continue
                found.append({"loader": loader, "source": source, "goal": what, "target": target,
                              "measured": round(ratio, 3), "met": ratio >= target})  # fmt: skip
    return found


def plot_rates(result: Path, rows: list[Row]) -> Path:
    """Images/s against batch size, a panel per source, a line per loader."""
    plt = pyplot()
    source_names = list(dict.fromkeys(row.name.partition(", batch ")[0] for row in rows))
    fig, grid = plt.subplots(1, len(source_names), figsize=(4.2 * len(source_names), 3.8),
                             squeeze=False)  # fmt: skip
    axes = grid[0]
    by_name = {row.name: row for row in rows}
    for ax, source in zip(axes, source_names, strict=True):
        for loader in (*LOADERS, ALONE):
            found = [(size, by_name.get(name(source, size, loader))) for size in BATCH_SIZES]
            points = [(size, row.per_second) for size, row in found if row and row.per_second]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=loader)
        ax.set_xscale("log", base=2)
        ax.set_xticks(BATCH_SIZES, [str(size) for size in BATCH_SIZES])
        ax.set_ylim(bottom=0)
        ax.set_title(source)
        ax.set_xlabel("batch size")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("images/s (median)")
    axes[0].legend(fontsize="small")
    return save_figure(fig, result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="samples of each source")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-batches", type=int, default=120, help="batches per timed run")
    parser.add_argument("--min-images", type=int, default=8000, help="images per timed run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="the DataPrefetcher's device")
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--sources", nargs="+", choices=SOURCES, default=list(SOURCES),
                        help="which kinds of data (default: all)")  # fmt: skip
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=list(BATCH_SIZES),
                        choices=BATCH_SIZES)  # fmt: skip
    parser.add_argument("--step", choices=["none", "srcnn"], default="none",
                        help="train a step on each batch, on --device")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: does it run?")
    budget_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.images, args.min_batches, args.min_images, args.rounds = 40, 4, 40, 1
    if args.images < CLASSES:
        parser.error(f"--images must be at least {CLASSES} (one a class), got {args.images}")

    torch.manual_seed(0)
    budget = Budget(args.budget_s)
    results: dict[str, list[tuple[float, float, int, int]] | str] = {}
    data = [source for source in sources(args.images) if source.name in args.sources]
    for source in data:
        results |= measure_source(source, args, budget)
    rows = rows_of(results)
    samples = len(data[0].ours)  # type: ignore[arg-type]
    settings = vars(args) | {
        "samples": samples,
        "epochs_per_run": {size: epochs_per_run(samples, size, args.min_batches,
                                                args.min_images)
                           for size in args.batch_sizes},
        "image": f"JPEG {IMAGE_SIZE}x{IMAGE_SIZE}",
        "in_memory": "x".join(map(str, SAMPLE_SHAPE)) + " uint8",
        "shuffle": True,
        "persistent_workers": args.workers > 0,
        "fastload_loader": repr(FastLoader(data[0].ours, **options(8, args))),
    }  # fmt: skip
    result = report(
        "small_batches", rows, baseline=name("image folder", 8, BASELINE), unit="images",
        settings=settings, out=args.out, summary={"goals": goals(rows)},
        cut_short=budget.cut_short,
    )  # fmt: skip
    for goal in goals(rows):
        print(f"{goal['loader']}, {goal['source']}: {goal['goal']} {goal['measured']:.2f}x "
              f"(goal {goal['target']}x): {'met' if goal['met'] else 'not met'}")  # fmt: skip
    if args.plot:
        plot_rates(result, rows)


if __name__ == "__main__":
    main()
