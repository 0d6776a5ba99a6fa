"""GPU memory over epochs: does feeding through DataPrefetcher (and GPUDecoder) grow it?

Five epochs through each pipeline (in turn); after each, the CUDA caching allocator's reserved and
allocated bytes. A stream or buffer made per batch or per epoch, or a tensor kept
alive by a stream it was recorded on, shows up as growth from epoch to epoch.

- DataPrefetcher: uint8 images in memory, FastLoader workers, the copy on the side
  stream, per-sample augmentation (RandomResizedCrop, flip, ColorJitter) and
  normalisation there, at depth 2;
- GPUDecoder: encoded JPEGs in memory, ``encoded_collate``, DataPrefetcher(decoder=...),
  the decoder finishing the batch (bfloat16, channels_last) on the producer thread.

Without CUDA the process's resident memory is reported instead (CPU fallback).

Usage:
    python benchmarks/gpu_memory.py [--epochs 5] [--batches 20] [--batch-size 256]
        [--budget-s S] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
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


def pipelines(args, device: torch.device) -> dict[str, DataPrefetcher]:
    size = args.input_size
    generator = torch.Generator().manual_seed(0)
    pixels = list(
        torch.randint(0, 256, (64, 3, size, size), dtype=torch.uint8, generator=generator)
    )
    length = args.batches * args.batch_size
    augment = nn.Sequential(
        gpu.RandomResizedCrop(args.size), gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.4, 0.4, 0.4)
    )
    decoded = FastLoader(Images(pixels, length), batch_size=args.batch_size)
    jpegs, _ = photo_jpegs(64)
    encoded = [torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) for jpeg in jpegs]
    encoded_loader = FastLoader(
        Images(encoded, length), batch_size=args.batch_size, collate_fn=encoded_collate
    )
    return {
        "DataPrefetcher + fastload.gpu augmentation": DataPrefetcher(
            decoded, device, mean=MEAN, std=STD, transform=augment, channels_last=True
        ),
        # the decoder finishes the batch (bf16, NHWC) on the producer thread
        "DataPrefetcher + GPUDecoder": DataPrefetcher(
            encoded_loader, device, decoder=GPUDecoder(
                args.size, device=device, flip=0.5, mean=MEAN, std=STD, dtype=torch.bfloat16,
                channels_last=True,
            ),
        ),
    }  # fmt: skip


def plot_memory(result: Path) -> Path:
    plt = pyplot()
    data = json.loads(result.read_text())
    key = data["summary"]["measure"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, epochs in data["summary"]["per_epoch"].items():
        ax.plot(range(1, len(epochs) + 1), [epoch[key] for epoch in epochs], marker="o", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{key} MiB")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(f"gpu_memory: {data['machine']['device']}")
    return save_figure(fig, result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--input-size", type=int, default=384)
    parser.add_argument("--size", type=int, default=224)
    suite_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.epochs, args.batches, args.batch_size, args.input_size, args.size = 3, 2, 4, 48, 32

    budget = Budget(args.budget_s)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    measure = "reserved" if device.type == "cuda" else "resident"
    feeds = pipelines(args, device)
    per_epoch: dict[str, list[dict[str, float]]] = {name: [] for name in feeds}
    seconds: dict[str, list[float]] = {name: [] for name in feeds}
    longest = 0.0
    for epoch in range(args.epochs):  # the pipelines in turn, so a budget cuts both alike
        for name, prefetcher in feeds.items():
            if not budget.allows(1.2 * longest, f"epoch {epoch + 1} of {args.epochs}"):
                break
            start = time.perf_counter()
            for images, _labels in prefetcher:
                del images
            synchronize(device)
            seconds[name].append(time.perf_counter() - start)
            longest = max(longest, seconds[name][-1])
            per_epoch[name].append(memory_mib(device))
    rows = []
    for name, epochs in per_epoch.items():
        if len(epochs) < 2:  # the first epoch is the warm-up
            rows.append(Row(name, None, 0, note=budget.cut_short or "fewer than 2 epochs"))
            continue
        extra = {
            f"{measure} MiB, epoch 1": f"{epochs[0][measure]:,.0f}",
            f"{measure} MiB, epoch {len(epochs)}": f"{epochs[-1][measure]:,.0f}",
        }
        for key in (measure, "device used"):  # device used: nvJPEG's memory too
            if key in epochs[0]:
                extra[f"{key} growth MiB"] = f"{epochs[-1][key] - epochs[0][key]:+,.1f}"
        images = args.batches * args.batch_size
        rows.append(Row(name, Measurement(tuple(seconds[name][1:])), images, extra, versus=name))
    print(f"device: {device_name()}" + ("" if device.type == "cuda" else ": CPU fallback"))
    result = report(
        "gpu_memory",
        rows,
        baseline=rows[0].name,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {"device": str(device)},
        out=args.out,
        summary={"measure": measure, "per_epoch": per_epoch},
        cut_short=budget.cut_short,
    )
    if args.plot:
        plot_memory(result)


if __name__ == "__main__":
    main()
