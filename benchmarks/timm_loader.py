"""timm's create_loader against fastload.integrations.timm.create_loader, on the CPU or a GPU.

The same folder of 500x375 photo-like JPEGs, timm's own train.py recipe: RandAugment
``rand-m9-mstd0.5-inc1``, random erasing 0.25 in pixel mode, mixup 0.8 / cutmix 1.0
(``FastCollateMixup`` as ``collate_fn``), 2 workers, both with ``use_prefetcher=True`` on
``--device`` (CUDA where there is one: timm's ``PrefetchLoader`` normalises and erases
there, fastload's loader augments there too), in two configurations (``--configs``): 64 px
batch 32 and 224 px batch 64.
timm reads with ``create_dataset`` (PIL); fastload with its ``ImageFolder`` (OpenCV,
crop-aware decode in the workers), its batch modules in the workers too. With ``inc1``
timm posterizes to 0 bits at high magnitudes, which Pillow (since 11) refuses: its row
says so, and the rows without ``inc1`` (``rand-m9-mstd0.5``) are the comparison.

With ``--model`` (``resnet18`` in ``make gpu-check``), each batch also trains that timm
model, as train.py's loop does (SGD, soft-target cross entropy on the mixed targets,
channels_last, bf16 autocast on a GPU): end to end, with a row for the step alone on one
batch already made (the ceiling) and each row's share of it.

Workers are not persistent, so that each epoch's worker processes are reaped and their
CPU time counted. One epoch is one timed run: a warm-up epoch each, then the loaders take
turns (interleaved); medians; CPU ms per image (this process and its workers); on a GPU
an epoch ends when the device has finished its last batch. Then, on the CPU, the per-op
table: each operation of the recipe, fastload's and timm's, on the same images, in one
thread, in ms per batch (median of the repeats).

Usage:
    python benchmarks/timm_loader.py [--configs 64px 224px] [--images 512] [--rounds 5]
        [--device cpu|cuda] [--model none|resnet18] [--workers 2] [--budget-s S] [--plot]
        [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Budget, Row, interleaved, plot, report, suite_arguments
from benchmarks.lib.data import photo_folder
from fastload.datasets.folder import ImageFolder
from fastload.finishing import ImageFinisher
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement, format_table

#: name: (image size, batch size), train.py's small and usual sizes.
CONFIGS = {"64px": (64, 32), "224px": (224, 64)}
#: row suffix: the RandAugment string.
POLICIES = {", inc1": "rand-m9-mstd0.5-inc1", "": "rand-m9-mstd0.5"}
CLASSES = 10


def settings(
    size: int, batch: int, policy: str, workers: int, mixup: Any, device: str = "cpu"
) -> dict[str, Any]:
    """create_loader's arguments for train.py's recipe (both libraries take the same)."""
    return {
        "input_size": (3, size, size),
        "batch_size": batch,
        "is_training": True,
        "auto_augment": policy,
        "re_prob": 0.25,
        "re_mode": "pixel",
        "num_workers": workers,
        "collate_fn": mixup,
        "device": torch.device(device),
        "persistent_workers": False,
    }


def timm_mixup() -> Any:
    import timm.data

    return timm.data.FastCollateMixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=CLASSES
    )


def loaders(root: Path, config: str, workers: int, device: str) -> dict[str, Any]:
    """Both libraries' loaders for ``config``, with and without ``inc1``."""
    import timm.data

    from fastload.integrations.timm import create_loader

    size, batch = CONFIGS[config]
    made: dict[str, Any] = {}
    for library in ("timm", "fastload"):
        for suffix, policy in POLICIES.items():
            given = settings(size, batch, policy, workers, timm_mixup(), device)
            made[f"{library} create_loader, {config}{suffix}"] = (
                timm.data.create_loader(timm.data.create_dataset("", root=str(root)), **given)
                if library == "timm"
                else create_loader(ImageFolder(root), **given)
            )
    return made


class Step:
    """train.py's step on each batch: a timm model, SGD, soft-target cross entropy (the
    mixed targets), channels_last; bf16 autocast on a GPU."""

    def __init__(self, model: str, device: str) -> None:
        import timm

        self.device = torch.device(device)
        self.model = timm.create_model(model, num_classes=CLASSES).to(self.device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(self.model(images), targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


def epoch(loader: Any, step: Step | None = None) -> tuple[float, float, int]:
    """One pass through ``loader`` (with ``step`` on each batch): seconds, CPU seconds (this
    process and its workers) and images."""
    started, cpu, images = time.perf_counter(), cpu_seconds_with_workers(), 0
    failure = None
    try:
        for batch, target in loader:
            images += len(batch)
            if step is not None:
                step(batch, target)
        if torch.cuda.is_available():  # the epoch ends when the device made its last batch
            torch.cuda.synchronize()
    except Exception as error:  # a worker's error: its first line and its cause's
        lines = str(error).strip().splitlines()
        failure = f"{lines[0]} {lines[-1]}" if len(lines) > 1 else lines[0]
    if failure is not None:
        # the failed epoch's workers shut down here, not in the next loader's forks
        gc.collect()
        raise RuntimeError(failure)
    return time.perf_counter() - started, cpu_seconds_with_workers() - cpu, images


def step_alone(loader: Any, step: Step) -> Callable[[], tuple[float, float, int]]:
    """An epoch of ``step`` on one batch of ``loader``'s already made: the ceiling."""
    batch = next(iter(loader))
    return lambda: epoch([batch] * len(loader), step)


def milliseconds(run: Callable[[], object], repeats: int, prepare: Callable[[], Any]) -> float:
    """Median ms of ``run(prepare())`` over ``repeats``, ``prepare`` and a first run
    (the warm-up) untimed."""
    run(prepare())  # type: ignore[call-arg]
    times = []
    for _ in range(repeats):
        given = prepare()
        started = time.perf_counter()
        run(given)  # type: ignore[call-arg]
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def per_op_costs(root: Path, config: str, repeats: int) -> dict[str, dict[str, float]]:
    """Each op of the recipe (without inc1, which timm cannot run), timm's and
    fastload's, on the same files, in one thread: ms per batch."""
    import timm.data
    from torch.utils.data import default_collate

    from fastload.integrations.timm import create_loader

    size, batch = CONFIGS[config]
    policy = POLICIES[""]
    theirs = timm.data.create_dataset("", root=str(root))
    primary, secondary, final = timm.data.create_transform(
        (3, size, size), is_training=True, auto_augment=policy, use_prefetcher=True,
        separate=True,
    )  # fmt: skip
    ours = create_loader(ImageFolder(root), **settings(size, batch, policy, 2, timm_mixup()))
    augment = ours.loader.collate_fn.transform  # the workers' batch modules (flip, policy)
    mixup, eraser = ours.mixup, ours.random_erasing
    finisher = ImageFinisher(torch.float32, mean=timm.data.IMAGENET_DEFAULT_MEAN,
                             std=timm.data.IMAGENET_DEFAULT_STD)  # fmt: skip
    mean = torch.tensor([255 * m for m in timm.data.IMAGENET_DEFAULT_MEAN]).view(1, 3, 1, 1)
    std = torch.tensor([255 * s for s in timm.data.IMAGENET_DEFAULT_STD]).view(1, 3, 1, 1)
    their_eraser = timm.data.random_erasing.RandomErasing(0.25, mode="pixel", device="cpu")
    their_mixup = timm_mixup()
    indices = range(batch)

    def mix(samples: list[Any]) -> Any:
        return mixup(*default_collate(samples))

    def their_normalise(images: torch.Tensor) -> torch.Tensor:
        return images.to(torch.float32).sub_(mean).div_(std)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        theirs.transform = primary
        crops = [theirs[i][0] for i in indices]
        their_samples = [(final(secondary(crop)), label) for crop, (_, label) in
                         zip(crops, (theirs[i] for i in indices), strict=True)]  # fmt: skip
        our_samples = [ours.dataset[i] for i in indices]
        our_batch = default_collate(our_samples)
        floats = finisher(our_batch[0])
        costs = {
            "decode + crop (timm: + flip)": (
                milliseconds(lambda _: [theirs[i] for i in indices], repeats, lambda: None),
                milliseconds(lambda _: [ours.dataset[i] for i in indices], repeats, lambda: None),
            ),
            "RandAugment (fastload: + flip)": (
                milliseconds(lambda _: [secondary(c) for c in crops], repeats, lambda: None),
                milliseconds(augment, repeats, lambda: our_batch[0]),
            ),
            "collate + mixup/cutmix": (
                milliseconds(their_mixup, 4 * repeats, lambda: their_samples),
                milliseconds(mix, 4 * repeats, lambda: our_samples),
            ),
            "normalise": (
                milliseconds(their_normalise, 4 * repeats, lambda: our_batch[0]),
                milliseconds(finisher, 4 * repeats, lambda: our_batch[0]),
            ),
            "random erasing (pixel)": (
                milliseconds(their_eraser, 4 * repeats, floats.clone),
                milliseconds(eraser, 4 * repeats, floats.clone),
            ),
        }
    finally:
        torch.set_num_threads(threads)
        theirs.transform = None
    return {op: {"timm": t, "fastload": f} for op, (t, f) in costs.items()}


def of_the_step_alone(rows: list[Row]) -> None:
    """Each measured row's rate as a share of its config's step alone, in its extra columns."""
    alone = {
        row.name.split(", ")[1]: row.per_second
        for row in rows
        if row.name.startswith("the step alone")
    }
    for row in rows:
        ceiling = alone.get(row.name.split(",")[1].strip())
        if row.per_second is not None and ceiling:
            row.extra["of the step alone"] = f"{100 * row.per_second / ceiling:.0f}%"


def per_op_table(costs: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = []
    for config, ops in costs.items():
        for op, cost in ops.items():
            rows.append([config, op, f"{cost['timm']:.2f}", f"{cost['fastload']:.2f}",
                         f"{cost['fastload'] / cost['timm']:.2f}x"])  # fmt: skip
    return format_table(
        ["config", "op (one thread)", "timm ms/batch", "fastload ms/batch", "fastload/timm"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--op-repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--model", default="none",
        help="a timm model trained on each batch (train.py's step), or none: the loader alone",
    )  # fmt: skip
    suite_arguments(parser)
    args = parser.parse_args()
    args.rounds = args.rounds or 5
    if args.smoke:
        CONFIGS.update({name: (32, 8) for name in CONFIGS})
        args.images, args.rounds, args.op_repeats = 32, 1, 1
    budget = Budget(args.budget_s)
    torch.manual_seed(0)
    root = photo_folder(args.out.parent / ".timm_loader_data" if args.smoke else
                        Path(__file__).parent / ".data" / "timm_loader", args.images)  # fmt: skip
    step = None if args.model == "none" else Step(args.model, args.device)
    runs: dict[str, Callable[[], tuple[float, float, int]]] = {}
    for config in args.configs:
        made = loaders(root, config, args.workers, args.device)
        runs |= {name: (lambda lo=lo: epoch(lo, step)) for name, lo in made.items()}
        if step is not None:
            runs[f"the step alone, {config}"] = step_alone(
                made[f"fastload create_loader, {config}"], step
            )
    results = interleaved(runs, rounds=args.rounds, budget=budget)
    rows = []
    for name, measured in results.items():
        config = name.split(",")[1].strip()
        versus = f"timm create_loader, {config}"  # the config's timm row, without inc1
        if isinstance(measured, str):
            note = measured if measured.startswith("not run") else f"failed: {measured}"
            rows.append(Row(name, None, 0, note=note, versus=versus))
            continue
        images = measured[0][2]
        cpu = float(np.median([c for _, c, _ in measured])) / images
        rows.append(Row(name, Measurement(tuple(w for w, _, _ in measured)), images,
                        {"CPU ms/image": f"{1000 * cpu:.2f}"}, versus=versus))  # fmt: skip
    if step is not None:
        of_the_step_alone(rows)
    costs = {}  # the CPU's per-op table: on a GPU the ops run on the device
    if args.device == "cpu" and budget.allows(0, "the per-op table"):
        costs = {config: per_op_costs(root, config, args.op_repeats) for config in args.configs}
    table = per_op_table(costs)
    print(table, end="\n\n")
    settings_used = {k: v for k, v in vars(args).items() if k not in ("out", "budget_s")}
    settings_used["configs"] = {name: CONFIGS[name] for name in args.configs}
    versions = {
        "timm": __import__("timm").__version__,
        "Pillow": __import__("PIL").__version__,
        "image": "JPEG 500x375",
    }
    result = report("timm_loader", rows, baseline=f"timm create_loader, {args.configs[0]}",
                    unit="images", settings=settings_used | versions, out=args.out,
                    summary={"per_op_ms_per_batch": costs, "per_op_table": table},
                    cut_short=budget.cut_short)  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
