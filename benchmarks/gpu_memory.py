"""GPU memory over epochs: does feeding through DataPrefetcher (and GPUDecoder) grow it?

Each pipeline runs in a process of its own (the caching allocator is one per process, so
its counters are that pipeline's alone): ``--epochs`` epochs, and after each the
allocator's reserved and allocated bytes and the device's used memory. The first
``--warmup`` epochs fill the allocator's pools (random crop sizes and colour-jitter orders
make different sets of blocks); what matters is the growth after them. A stream or buffer
made per batch or per epoch, or a tensor kept alive by a stream it was recorded on, shows
up there, epoch after epoch.

- DataPrefetcher: uint8 images in memory, FastLoader workers, the copy on the side
  stream, per-sample augmentation (RandomResizedCrop, flip, ColorJitter) and
  normalisation there, at depth 2;
- GPUDecoder: encoded JPEGs in memory, ``encoded_collate``, DataPrefetcher(decoder=...),
  the decoder finishing the batch (bfloat16, channels_last) on the producer thread, which
  begins each next epoch while the last batch is taken (its first batches are held
  between epochs: the allocated column).

Without CUDA the process's resident memory is reported instead (CPU fallback).

Usage:
    python benchmarks/gpu_memory.py [--epochs 5] [--warmup 3] [--batches 20]
        [--batch-size 256] [--budget-s S] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    device_name,
    pyplot,
    report,
    save_figure,
    suite_arguments,
    synchronize,
)
from benchmarks.lib.data import photo_jpegs
from fastload import DataPrefetcher, FastLoader, gpu
from fastload.collate import encoded_collate
from fastload.decode import GPUDecoder
from fastload.tools.measure import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
MIB = 2**20


class Images(Dataset):
    """Items from a fixed pool, repeated to ``length``."""

    def __init__(self, pool: list, length: int) -> None:
        self.pool, self.length = pool, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.pool[index % len(self.pool)], index % 10


def memory_mib(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return {
            "reserved": torch.cuda.memory_reserved(device) / MIB,
            "allocated": torch.cuda.memory_allocated(device) / MIB,
            # nvJPEG allocates outside PyTorch's caching allocator: only this sees it
            "device used": (total - free) / MIB,
        }
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return {"resident": pages * os.sysconf("SC_PAGE_SIZE") / MIB}


PIPELINES = ("DataPrefetcher + fastload.gpu augmentation", "DataPrefetcher + GPUDecoder")


def pipeline(name: str, args, device: torch.device) -> DataPrefetcher:
    length = args.batches * args.batch_size
    if name == PIPELINES[0]:
        size = args.input_size
        generator = torch.Generator().manual_seed(0)
        pixels = list(
            torch.randint(0, 256, (64, 3, size, size), dtype=torch.uint8, generator=generator)
        )
        augment = nn.Sequential(
            gpu.RandomResizedCrop(args.size), gpu.RandomHorizontalFlip(),
            gpu.ColorJitter(0.4, 0.4, 0.4),
        )  # fmt: skip
        decoded = FastLoader(Images(pixels, length), batch_size=args.batch_size)
        return DataPrefetcher(
            decoded, device, mean=MEAN, std=STD, transform=augment, channels_last=True
        )
    jpegs, _ = photo_jpegs(64)
    encoded = [torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) for jpeg in jpegs]
    encoded_loader = FastLoader(
        Images(encoded, length), batch_size=args.batch_size, collate_fn=encoded_collate
    )
    # the decoder finishes the batch (bf16, NHWC) on the producer thread
    return DataPrefetcher(
        encoded_loader, device, decoder=GPUDecoder(
            args.size, device=device, flip=0.5, mean=MEAN, std=STD, dtype=torch.bfloat16,
            channels_last=True,
        ),
    )  # fmt: skip


def epochs_of(name: str, args) -> dict:
    """``name``'s epochs in this process: memory after each, seconds, where it was cut."""
    budget = Budget(args.budget_s)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    prefetcher = pipeline(name, args, device)
    per_epoch, seconds = [], []
    for epoch in range(args.epochs):
        if seconds and not budget.allows(1.2 * max(seconds), f"epoch {epoch + 1}"):
            break
        start = time.perf_counter()
        for images, _labels in prefetcher:
            del images
        synchronize(device)
        seconds.append(time.perf_counter() - start)
        per_epoch.append(memory_mib(device))
    return {"per_epoch": per_epoch, "seconds": seconds, "cut_short": budget.cut_short,
            "process": os.getpid()}  # fmt: skip


def in_own_process(name: str, args, seconds: float) -> dict:
    """:func:`epochs_of` in a new process, given ``seconds``; its error as a note."""
    command = [sys.executable, __file__, "--pipeline", name, "--budget-s", f"{seconds:.0f}",
               *(f"--{key.replace('_', '-')}={getattr(args, key)}" for key in SIZES)]  # fmt: skip
    limit = seconds + 60 if math.isfinite(seconds) else None  # its start, past its budget
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"note": f"killed after {limit:.0f} s"}
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        lines = done.stderr.strip().splitlines()
        return {"note": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def growth(epochs: list[dict[str, float]], key: str, warmup: int) -> float:
    """How much ``key`` grew from the end of the warm-up to the last epoch."""
    return epochs[-1][key] - epochs[warmup - 1][key]


def plot_memory(result: Path) -> Path:
    plt = pyplot()
    data = json.loads(result.read_text())
    key = data["summary"]["measure"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, epochs in data["summary"]["per_epoch"].items():
        ax.plot(range(1, len(epochs) + 1), [epoch[key] for epoch in epochs], marker="o", label=name)
    if data["summary"].get("warmup"):
        ax.axvline(data["summary"]["warmup"], color="grey", linestyle=":", label="warm-up's end")
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{key} MiB")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(f"gpu_memory: {data['machine']['device']}")
    return save_figure(fig, result)


#: The options that size a pipeline's run, passed on to its process.
SIZES = ("epochs", "batches", "batch_size", "input_size", "size")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="epochs that fill the pools")
    parser.add_argument("--batches", type=int, default=20, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--input-size", type=int, default=384)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--pipeline", choices=PIPELINES, help="run only this one, print JSON")
    suite_arguments(parser)
    args = parser.parse_args()
    if args.pipeline:  # one pipeline's process
        print(json.dumps(epochs_of(args.pipeline, args)))
        return
    if args.smoke:
        args.epochs, args.warmup, args.batches = 3, 1, 2
        args.batch_size, args.input_size, args.size = 4, 48, 32
    if not 1 <= args.warmup < args.epochs:
        parser.error(f"--warmup {args.warmup} must be at least 1 and below --epochs {args.epochs}")

    budget = Budget(args.budget_s)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    measure = "reserved" if device.type == "cuda" else "resident"
    measured = {}
    for index, name in enumerate(PIPELINES):  # each its share of what is left
        measured[name] = in_own_process(name, args, budget.left() / (len(PIPELINES) - index))
    rows = []
    for name, run in measured.items():
        epochs = run.get("per_epoch", [])
        if len(epochs) <= args.warmup:
            note = run.get("note") or run.get("cut_short") or "no epoch after the warm-up"
            rows.append(Row(name, None, 0, note=note))
            continue
        last = len(epochs)
        extra = {
            f"{measure} MiB, epoch 1": f"{epochs[0][measure]:,.0f}",
            f"after the warm-up (epoch {args.warmup})": f"{epochs[args.warmup - 1][measure]:,.0f}",
            f"epoch {last}": f"{epochs[-1][measure]:,.0f}",
        }
        for key in (measure, "device used"):  # device used: nvJPEG's memory too
            if key in epochs[0]:
                extra[f"{key} growth after the warm-up MiB"] = (
                    f"{growth(epochs, key, args.warmup):+,.1f}"
                )
        if "allocated" in epochs[-1]:
            extra["allocated MiB after its epochs"] = f"{epochs[-1]['allocated']:,.0f}"
        images = args.batches * args.batch_size
        rows.append(Row(name, Measurement(tuple(run["seconds"][1:])), images, extra, versus=name))
    cut_short = next((run["cut_short"] for run in measured.values() if run.get("cut_short")), None)
    print(f"device: {device_name()}" + ("" if device.type == "cuda" else ": CPU fallback"))
    result = report(
        "gpu_memory",
        rows,
        baseline=rows[0].name,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key not in ("out", "pipeline")}
        | {"device": str(device)},
        out=args.out,
        summary={
            "measure": measure,
            "warmup": args.warmup,
            "per_epoch": {name: run.get("per_epoch", []) for name, run in measured.items()},
            "process": {name: run.get("process") for name, run in measured.items()},
        },
        cut_short=cut_short,
    )
    if args.plot:
        plot_memory(result)


if __name__ == "__main__":
    main()
