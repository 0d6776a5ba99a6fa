"""Feeding a training step: how much of the loop waits for data, per way of copying it.

A ResNet-50 training step (bf16 autocast on CUDA, channels_last, SGD; batch 256 of 224 px
by default) is fed from a FastLoader whose workers hand out uint8 images held in memory,
so what is measured is the hand-over to the device, not decoding. Ways to feed it:

- step alone: one batch already on the device, used again each step (the ceiling);
- usual loop: ``images.cuda(non_blocking=True)`` in the loop, then float and normalise;
- apex ``data_prefetcher`` (the recipe of shared/seeds/001, written out below);
- timm ``PrefetchLoader`` (if timm is installed: reported as missing otherwise);
- fastload ``DataPrefetcher`` at each of ``--depths`` batches in flight;
- a loader made slower than the step on purpose (a sleep per batch in its one worker, of
  twice the step alone), with the usual loop and with DataPrefetcher: both then wait the
  same, which shows that the wait is the loader's, not the copy's.

Columns: images/s of the whole loop; "data wait", the share of the loop in which the GPU
ran no step (CUDA events around each step, no synchronisation inside the loop; on a CPU,
the time spent asking for the next batch); "CPU ms/image" of this process and its
workers. Variants run in interleaved rounds after a warm-up round; medians.

Usage:
    python benchmarks/prefetch.py [--model resnet50] [--batch-size 256] [--image-size 224]
        [--steps 30] [--depths 1,2,3] [--rounds 3] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import statistics
import time
from collections.abc import Callable, Iterable, Iterator

import torch
import torchvision
from torch import nn
from torch.utils.data import Dataset

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
from fastload import DataPrefetcher, FastLoader
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
Batches = Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]


class InMemoryImages(Dataset):
    """``length`` uint8 CHW images drawn from a pool of ``pool`` distinct ones; with
    ``delay`` seconds, the first sample of each batch of ``batch_size`` sleeps that long."""

    def __init__(
        self, length: int, size: int, *, pool: int = 256, delay: float = 0.0, batch_size: int = 1
    ) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (pool, 3, size, size), dtype=torch.uint8,
                                    generator=generator)  # fmt: skip
        self.length, self.delay, self.batch_size = length, delay, batch_size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.delay and index % self.batch_size == 0:
            time.sleep(self.delay)
        return self.images[index % len(self.images)], index % 1000


class ApexPrefetcher:
    """NVIDIA apex's ``data_prefetcher`` (examples/imagenet/main_amp.py), as users copy it;
    the stream calls are skipped on a CPU so that the script runs anywhere."""

    def __init__(self, loader, device: torch.device) -> None:
        self.loader = iter(loader)
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream() if self.cuda else None
        self.mean = torch.tensor([m * 255 for m in MEAN], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([s * 255 for s in STD], device=device).view(1, 3, 1, 1)
        self.preload()

    def preload(self) -> None:
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None
            return
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            self.next_input = self.next_input.to(self.device, non_blocking=True)
            self.next_target = self.next_target.to(self.device, non_blocking=True)
            self.next_input = self.next_input.float()
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)

    def next(self):
        if self.cuda:
            torch.cuda.current_stream().wait_stream(self.stream)
        images, target = self.next_input, self.next_target
        if images is not None and self.cuda:
            images.record_stream(torch.cuda.current_stream())
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return images, target


def apex_batches(loader, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    prefetcher = ApexPrefetcher(loader, device)
    images, labels = prefetcher.next()
    while images is not None:
        yield images, labels
        images, labels = prefetcher.next()


def usual_batches(loader, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    for images, labels in loader:
        images = images.to(device, non_blocking=True).float().sub_(mean).div_(std)
        yield images, labels.to(device, non_blocking=True)


def timm_prefetch_loader(loader, device: torch.device):
    """timm's PrefetchLoader, or None when timm is not installed."""
    try:
        from timm.data.loader import PrefetchLoader
    except ImportError:
        return None
    options = {"mean": MEAN, "std": STD}
    if "device" in inspect.signature(PrefetchLoader).parameters:  # timm >= 0.9
        options["device"] = device
    return PrefetchLoader(loader, **options)


class Trainer:
    """The training step, and the clock of a timed pass over ``steps`` batches."""

    def __init__(self, model: str, device: torch.device, steps: int) -> None:
        torch.manual_seed(0)
        self.device = device
        self.model = getattr(torchvision.models, model)(num_classes=1000)
        self.model = self.model.to(device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.steps = steps
        cuda = device.type == "cuda"
        self.events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(steps)
        ] if cuda else []  # fmt: skip

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def run(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
        """Seconds, data wait share and CPU seconds of ``steps`` steps fed by ``batches``."""
        synchronize(self.device)
        cpu, start, asking = cpu_seconds_with_workers(), time.perf_counter(), 0.0
        iterator = iter(batches)
        for index in range(self.steps):
            asked = time.perf_counter()
            images, labels = next(iterator)
            asking += time.perf_counter() - asked
            if self.events:
                self.events[index][0].record()
            self.step(images, labels)
            if self.events:
                self.events[index][1].record()
        synchronize(self.device)
        seconds = time.perf_counter() - start
        if self.events:  # the share of the loop in which the GPU ran no step
            busy = sum(begin.elapsed_time(end) for begin, end in self.events)
            wait = 1 - busy / self.events[0][0].elapsed_time(self.events[-1][1])
        else:
            wait = asking / seconds
        return {"seconds": seconds, "wait": wait, "cpu": cpu_seconds_with_workers() - cpu}


def variants(args, trainer: Trainer, device: torch.device) -> dict[str, Batches | str]:
    """Each variant's batches for one pass, or why it cannot run here."""
    length = args.batch_size * args.steps
    loader = FastLoader(InMemoryImages(length, args.image_size), batch_size=args.batch_size)
    args.num_workers = loader.num_workers
    cached = next(iter(DataPrefetcher(loader, device, mean=MEAN, std=STD, channels_last=True)))

    def step_alone():
        return (cached for _ in range(args.steps))

    found: dict[str, Batches | str] = {
        "step alone (batch already on the device)": step_alone,
        "usual loop (.cuda() then normalise)": lambda: usual_batches(loader, device),
        "apex data_prefetcher": lambda: apex_batches(loader, device),
    }
    timm_loader = timm_prefetch_loader(loader, device)
    found["timm PrefetchLoader"] = (
        (lambda: timm_loader) if timm_loader is not None else "not installed: pip install timm"
    )
    for depth in args.depths:
        prefetcher = DataPrefetcher(loader, device, mean=MEAN, std=STD, channels_last=True,
                                    depth=depth)  # fmt: skip
        found[f"fastload DataPrefetcher, depth {depth}"] = lambda p=prefetcher: p
    return found


def slow_variants(args, trainer: Trainer, device: torch.device, step_s: float) -> dict:
    """The same loop behind a loader that delivers one batch per twice the step alone."""
    slow = FastLoader(
        InMemoryImages(args.batch_size * args.steps, args.image_size, delay=2 * step_s,
                       batch_size=args.batch_size),
        batch_size=args.batch_size, num_workers=1, prefetch_factor=2,
    )  # fmt: skip
    prefetcher = DataPrefetcher(slow, device, mean=MEAN, std=STD, channels_last=True)
    return {
        "slow loader (2x the step): usual loop": lambda: usual_batches(slow, device),
        "slow loader (2x the step): DataPrefetcher, depth 2": lambda: prefetcher,
    }


def rows_from(results: dict, args, baseline: str) -> list[Row]:
    images = args.batch_size * args.steps
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, images, note=runs))
            continue
        seconds = Measurement(tuple(run["seconds"] for run in runs))
        extra = {
            "data wait": f"{100 * statistics.median(run['wait'] for run in runs):.1f}%",
            "CPU ms/image": f"{1000 * statistics.median(run['cpu'] for run in runs) / images:.2f}",
        }
        versus = "slow loader (2x the step): usual loop" if name.startswith("slow") else None
        rows.append(Row(name, seconds, images, extra, versus=versus))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision model name")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=30, help="steps per timed pass")
    parser.add_argument("--depths", default="1,2,3", help="DataPrefetcher depths to compare")
    suite_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.model, args.batch_size, args.image_size, args.steps = "squeezenet1_1", 4, 32, 3
    args.rounds = args.rounds or (1 if args.smoke else 3)
    args.depths = [int(depth) for depth in str(args.depths).split(",")]
    budget = Budget(args.budget_s)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    trainer = Trainer(args.model, device, args.steps)
    found = variants(args, trainer, device)
    runnable = {name: v for name, v in found.items() if not isinstance(v, str)}
    results = interleaved(
        {name: (lambda make=make: trainer.run(make())) for name, make in runnable.items()},
        rounds=args.rounds,
        budget=budget,
    )
    alone = results["step alone (batch already on the device)"]
    if isinstance(alone, str):
        raise SystemExit(f"the training step itself failed: {alone}")
    step_s = statistics.median(run["seconds"] for run in alone) / args.steps
    slow = slow_variants(args, trainer, device, step_s)
    results |= interleaved(
        {name: (lambda make=make: trainer.run(make())) for name, make in slow.items()},
        rounds=args.rounds,
        budget=budget,
    )
    results = {name: results.get(name, found.get(name)) for name in [*found, *slow]}
    baseline = "usual loop (.cuda() then normalise)"
    rows = rows_from(results, args, baseline)
    cuda = device.type == "cuda"
    print(f"device: {device_name()}" + ("" if cuda else ": CPU fallback, no GPU figure"))
    result = report(
        "prefetch",
        rows,
        baseline=baseline,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {"device": str(device), "autocast": "bfloat16", "step_alone_ms": 1000 * step_s,
           "data_wait": "GPU idle share between steps (CUDA events)" if cuda
           else "time asking for the next batch"},
        out=args.out, cut_short=budget.cut_short,
    )  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
