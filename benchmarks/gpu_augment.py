"""GPU batch augmentation: fastload.gpu vs torchvision v2 and Kornia, and vs the CPU.

A batch of 256 uint8 images of 384x384 becomes a float32 batch of 224x224 (0..1) through
three recipes:

- seed: RandomResizedCrop 224, horizontal flip, ColorJitter(0.2, 0.2) (shared/seeds/000);
- timm: RandomResizedCrop 224, flip, ColorJitter(0.4, 0.4, 0.4), RandomErasing(p=0.25),
  then MixUp (alpha 0.8) or CutMix (alpha 1.0), one of the two per batch, as timm does;
- policy: RandomResizedCrop 224, flip, TrivialAugmentWide, RandomErasing(p=0.25) (timm's
  and torchvision's reference ImageNet recipe with an automatic policy).

Ways to run each recipe:

- torchvision per sample on the CPU in one DataLoader worker per core, then the batch
  to the device (what the recipe costs without a GPU: the baseline);
- torchvision v2 on the batch on the device (one draw for the whole batch: every image
  gets the same crop);
- torchvision per sample in a Python loop on the device;
- fastload.gpu (per-sample parameters, one vectorised call per module), and the same
  under ``torch.compile`` (in its own rounds after the others: compiling takes long);
- Kornia's AugmentationSequential (per-sample parameters; float input, so the batch is
  converted first; Kornia's own MixUp/CutMix), if installed.

Images/s are medians of interleaved rounds after a warm-up round; "CPU ms/image" counts
this process and its workers.

Usage:
    python benchmarks/gpu_augment.py [--batch-size 256] [--batches 8] [--workers N]
        [--rounds 3] [--no-compile] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import inspect
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate
from torchvision.transforms import v2

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    device_name,
    interleaved,
    plot,
    report,
    suite_arguments,
    synchronize,
)
from fastload import gpu
from fastload.system import available_cpus
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

NUM_CLASSES = 1000
COMPILED = "fastload.gpu + torch.compile"
JITTER = {"seed": (0.2, 0.2, 0.0), "timm": (0.4, 0.4, 0.4)}
Augment = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class MixOrCut:
    """timm's batch mode: MixUp or CutMix, one of the two for the whole batch."""

    def __init__(self, mixup: Callable, cutmix: Callable) -> None:
        self.mixup, self.cutmix = mixup, cutmix

    def __call__(self, images: torch.Tensor, labels: torch.Tensor):
        return (self.mixup if random.random() < 0.5 else self.cutmix)(images, labels)


def torchvision_ops(recipe: str, size: int) -> list[nn.Module]:
    colour = v2.TrivialAugmentWide() if recipe == "policy" else v2.ColorJitter(*JITTER[recipe])
    ops = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(), colour,
           v2.ToDtype(torch.float32, scale=True)]  # fmt: skip
    return [*ops, v2.RandomErasing(p=0.25)] if recipe in ("timm", "policy") else ops


def torchvision_mix(recipe: str) -> Callable | None:
    if recipe != "timm":
        return None
    return MixOrCut(v2.MixUp(alpha=0.8, num_classes=NUM_CLASSES),
                    v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES))  # fmt: skip


def fastload_ops(recipe: str, size: int) -> nn.Sequential:
    colour = gpu.TrivialAugmentWide() if recipe == "policy" else gpu.ColorJitter(*JITTER[recipe])
    ops = [gpu.RandomResizedCrop(size), gpu.RandomHorizontalFlip(), colour,
           gpu.ToDtype(torch.float32, scale=True)]  # fmt: skip
    if recipe in ("timm", "policy"):
        ops.append(gpu.RandomErasing(p=0.25))
    return nn.Sequential(*ops)


def fastload_mix(recipe: str) -> Callable | None:
    if recipe != "timm":
        return None
    return MixOrCut(gpu.MixUp(alpha=0.8, num_classes=NUM_CLASSES),
                    gpu.CutMix(alpha=1.0, num_classes=NUM_CLASSES))  # fmt: skip


def kornia_recipe(recipe: str, size: int) -> tuple[nn.Module, Callable | None] | str:
    try:
        import kornia.augmentation as K
    except ImportError:
        return "not installed: pip install kornia"
    if recipe == "policy":  # Kornia's own TrivialAugment (its op set, not torchvision's Wide)
        from kornia.augmentation.auto import TrivialAugment

        policy = [K.RandomResizedCrop((size, size)), K.RandomHorizontalFlip(), TrivialAugment(),
                  K.RandomErasing(p=0.25)]  # fmt: skip
        return K.AugmentationSequential(*policy), None
    ops = [K.RandomResizedCrop((size, size)), K.RandomHorizontalFlip(),
           K.ColorJitter(*JITTER[recipe])]  # fmt: skip
    if recipe == "timm":
        ops.append(K.RandomErasing(p=0.25))
        cutmix_options = {"data_keys": ["input", "class"]}
        if "use_correct_lambda" in inspect.signature(K.RandomCutMixV2).parameters:
            cutmix_options["use_correct_lambda"] = True  # the paper's lambda, as ours
        mix = MixOrCut(K.RandomMixUpV2(data_keys=["input", "class"]),
                       K.RandomCutMixV2(**cutmix_options))  # fmt: skip
        return K.AugmentationSequential(*ops), mix
    return K.AugmentationSequential(*ops), None


def on_batch(ops: Callable, mix: Callable | None, *, to_float: bool = False) -> Augment:
    def augment(images, labels):
        if to_float:
            images = images.float().div_(255)
        out = ops(images)
        return mix(out, labels) if mix is not None else (out, labels)

    return augment


def per_sample_loop(ops: list[nn.Module], mix: Callable | None) -> Augment:
    transform = v2.Compose(ops)

    def augment(images, labels):
        out = torch.stack([transform(image) for image in images])
        return mix(out, labels) if mix is not None else (out, labels)

    return augment


class PerSample(Dataset):
    def __init__(self, images: torch.Tensor, length: int, transform: Callable) -> None:
        self.images, self.length, self.transform = images, length, transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.transform(self.images[index % len(self.images)]), index % NUM_CLASSES


class MixCollate:
    def __init__(self, mix: Callable | None) -> None:
        self.mix = mix

    def __call__(self, samples):
        batch = default_collate(samples)
        return self.mix(*batch) if self.mix is not None else batch


def cpu_pass(images, recipe, args, device) -> Callable[[], dict[str, float]]:
    """One pass of the per-sample CPU recipe through a DataLoader, batches to the device."""
    batches = max(args.batches, 4 * args.workers)  # every worker busy for a while
    transform = v2.Compose(torchvision_ops(recipe, args.size))
    loader = DataLoader(
        PerSample(images, batches * args.batch_size, transform),
        batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0,
        pin_memory=device.type == "cuda", collate_fn=MixCollate(torchvision_mix(recipe)),
    )  # fmt: skip

    def run():
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        for out, labels in loader:
            out.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        synchronize(device)
        return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds_with_workers() - cpu,
                "images": batches * args.batch_size}  # fmt: skip

    return run


def device_pass(augment: Augment, batch, labels, args, device) -> Callable[[], dict[str, float]]:
    def run():
        synchronize(device)
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        for _ in range(args.batches):
            augment(batch, labels)
        synchronize(device)
        return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds_with_workers() - cpu,
                "images": args.batches * args.batch_size}  # fmt: skip

    return run


def variants(recipe: str, args, device, cpu_images, batch, labels) -> dict[str, Callable | str]:
    found: dict[str, Callable | str] = {}
    baseline = f"{recipe}: torchvision per sample, CPU, {args.workers} workers"
    found[baseline] = cpu_pass(cpu_images, recipe, args, device)
    tv_ops, tv_mix = torchvision_ops(recipe, args.size), torchvision_mix(recipe)
    ours, our_mix = fastload_ops(recipe, args.size).to(device), fastload_mix(recipe)
    augments: dict[str, Augment | str] = {
        "torchvision v2 on the batch (one draw per batch)": on_batch(
            nn.Sequential(*tv_ops), tv_mix
        ),
        "torchvision per sample, Python loop on the device": per_sample_loop(tv_ops, tv_mix),
        "fastload.gpu": on_batch(ours, our_mix),
    }
    # Compiling can take minutes: measured after the others (see main), so that a slow
    # compile never costs the rest of the table.
    augments[COMPILED] = "measured after the others" if args.compile else "not run (--no-compile)"
    kornia = kornia_recipe(recipe, args.size)
    augments["Kornia AugmentationSequential"] = (
        kornia if isinstance(kornia, str)
        else on_batch(kornia[0].to(device), kornia[1], to_float=True)
    )  # fmt: skip
    for name, augment in augments.items():
        if not isinstance(augment, str):
            augment = device_pass(augment, batch, labels, args, device)
        found[f"{recipe}: {name}"] = augment
    return found


def compile_settles(augment: Augment, batch, labels, device, budget_s: float) -> str | None:
    """Call a compiled ``augment`` until 8 calls in a row run without compiling (each under a
    second); None once they do, else why it is not timed. A graph that recompiles for new
    random draws would otherwise be timed compiling."""
    start, quick = time.perf_counter(), 0
    while quick < 8:
        if time.perf_counter() - start > budget_s:
            return f"not timed: still compiling after {budget_s:.0f} s"
        called = time.perf_counter()
        augment(batch, labels)
        synchronize(device)
        quick = quick + 1 if time.perf_counter() - called < 1.0 else 0
    return None


def where_the_time_goes(recipe: str, args, batch: torch.Tensor, device) -> dict[str, float]:
    """Milliseconds per batch of each fastload.gpu module of the recipe, in order."""
    times, images = {}, batch
    for module in fastload_ops(recipe, args.size).to(device):
        module(images)  # warm-up
        synchronize(device)
        start = time.perf_counter()
        for _ in range(args.batches):
            out = module(images)
        synchronize(device)
        times[type(module).__name__] = round(1000 * (time.perf_counter() - start) / args.batches, 3)
        images = out
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--input-size", type=int, default=384)
    parser.add_argument("--size", type=int, default=224, help="output side")
    parser.add_argument("--batches", type=int, default=8, help="batches per timed pass")
    parser.add_argument(
        "--workers", type=int, default=available_cpus(), help="CPU baseline workers"
    )
    parser.add_argument("--recipes", default="seed,timm,policy")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--compile-budget-s", type=float, default=75, help="per recipe")
    suite_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.batch_size, args.input_size, args.size, args.batches = 8, 48, 32, 2
        args.workers, args.compile = min(args.workers, 2), False
    args.rounds = args.rounds or (1 if args.smoke else 3)
    budget = Budget(args.budget_s)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch_size, 3, args.input_size, args.input_size)
    cpu_images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    batch = cpu_images.to(device)
    labels = torch.randint(0, NUM_CLASSES, (args.batch_size,), generator=generator).to(device)

    rows, breakdown = [], {}
    for recipe in args.recipes.split(","):
        found = variants(recipe, args, device, cpu_images, batch, labels)
        runnable = {name: run for name, run in found.items() if not isinstance(run, str)}
        results = interleaved(runnable, rounds=args.rounds, budget=budget)
        baseline = next(iter(found))
        rows += [to_row(name, results.get(name, found[name]), baseline) for name in found]
        breakdown[recipe] = where_the_time_goes(recipe, args, batch, device)
    cuda = device.type == "cuda"
    print(f"device: {device_name()}" + ("" if cuda else ": CPU fallback, no GPU figure"))
    print(f"fastload.gpu ms per batch, module by module: {breakdown}")

    def write() -> Path:
        return report(
            "gpu_augment",
            rows,
            baseline=rows[0].name,
            unit="images",
            settings={key: value for key, value in vars(args).items() if key != "out"}
            | {"device": str(device), "output": f"float32 0..1, {args.size}x{args.size}"},
            out=args.out,
            summary={"fastload_ms_per_batch_by_module": breakdown},
            cut_short=budget.cut_short,
        )

    result = write()
    if args.compile:
        for recipe in args.recipes.split(","):
            compiled = on_batch(
                torch.compile(fastload_ops(recipe, args.size).to(device)), fastload_mix(recipe)
            )
            name = f"{recipe}: {COMPILED}"
            unsettled = compile_settles(compiled, batch, labels, device, args.compile_budget_s)
            runs = (
                unsettled
                or interleaved(
                    {name: device_pass(compiled, batch, labels, args, device)},
                    rounds=args.rounds,
                    budget=budget,
                )[name]
            )
            index = next(i for i, row in enumerate(rows) if row.name == name)
            rows[index] = to_row(name, runs, rows[index].versus)
        result = write()
    if args.plot:
        plot(result)


def to_row(name: str, runs: list[dict[str, float]] | str, baseline: str) -> Row:
    if isinstance(runs, str):
        return Row(name, None, 0, versus=baseline, note=runs)
    images = runs[0]["images"]
    cpu = statistics.median(run["cpu"] for run in runs)
    seconds = Measurement(tuple(run["seconds"] for run in runs))
    return Row(
        name, seconds, images, {"CPU ms/image": f"{1000 * cpu / images:.3f}"}, versus=baseline
    )


if __name__ == "__main__":
    main()
