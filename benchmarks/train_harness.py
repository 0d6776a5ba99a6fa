"""The end-to-end benchmarks' training harness (benchmarks/end_to_end.py runs each variant
through it): train a ResNet on an image folder or a fastload LMDB file with fastload's
pipeline, the plain torchvision one with --baseline, or NVIDIA DALI's with --dali. Runs
alone or under torchrun. The short example for users is examples/train_classifier.py.

    python benchmarks/train_harness.py data/train                  # fastload
    python benchmarks/train_harness.py data/train --baseline       # torchvision + DataLoader
    python benchmarks/train_harness.py train.lmdb --decode gpu     # bytes only on the CPU
    python benchmarks/train_harness.py train.lmdb --decode gpu-fused --dtype bfloat16
    python benchmarks/train_harness.py data/train --dali           # DALI, for comparison
    torchrun --nproc-per-node 8 benchmarks/train_harness.py train.lmdb

fastload: FastLoader + (OpenCV decode and RandomResizedCrop in the workers, or
GPUDecoder) + DataPrefetcher; flip and colour jitter per sample on the GPU, or, without
one, in the workers on uint8 (where they are cheapest on a CPU). ``gpu-fused``: the
decoder crops, flips and normalises in one pass, no colour jitter (DALI's recipe).
Baseline: torchvision ImageFolder + the same augmentation as torchvision transforms on
PIL, ToTensor and Normalize on the CPU, DataLoader, .to(device) in the loop.
DALI: file reader, ``decoders.image_random_crop`` (mixed on a GPU), resize,
``crop_mirror_normalize`` with a coin flip: the ``gpu-fused`` recipe.
--model none times the input pipeline alone. --json prints one line of metrics. On a
GPU, the data wait is the GPU's idle time between steps, from CUDA events (nothing
synchronises inside the loop); on a CPU, the loop's wait for each batch. On a GPU the
epoch is also split into its fill (the wait for the first batch) and its steady state (the
rate over the steps after the first tenth), and the CPU time of each of this process's
threads (the prefetcher's reading and device threads, the loop) is reported per image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import thread_cpu
from benchmarks.lib.engines import EngineSampler
from fastload import DataPrefetcher, FastLoader, ImageFolder, LMDBDataset, gpu, timed
from fastload.decode import GPUDecoder
from fastload.system import available_cpus
from fastload.tools.diagnostics.gpu_idle import StepEvents
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: --serve: the line that says the harness waits for the next round's epoch count.
READY = "ready"


def cpu_share(args) -> dict[str, float | int]:
    """GPUDecoder's ``cpu_share`` with a thread per core for it, or nothing (its defaults)."""
    return {"cpu_share": args.cpu_share, "threads": available_cpus()} if args.cpu_share else {}


def fastload_pipeline(args, device: torch.device) -> tuple[DataPrefetcher, int]:
    from fastload.collate import encoded_collate, uint8_collate
    from fastload.transforms import Albumentations, RandomResizedCrop

    folder = ImageFolder if args.data.is_dir() else LMDBDataset
    augment_on_gpu = args.augment == "gpu"
    dtype = getattr(torch, args.dtype)
    cuda = device.type == "cuda"
    if args.decode == "gpu-fused":  # crop, flip, normalise, dtype and layout in the decoder
        dataset = folder(args.data, decode=None)
        decoder = GPUDecoder(
            args.image_size, device=device, flip=0.5, mean=MEAN, std=STD, dtype=dtype,
            channels_last=cuda, **cpu_share(args),
        )  # fmt: skip
        loader = FastLoader(
            dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
            collate_fn=encoded_collate, drop_last=True,
        )  # fmt: skip
        return DataPrefetcher(loader, device, decoder=decoder), len(dataset.classes)
    if args.decode == "gpu":  # the workers read bytes; the GPU decodes and crops
        dataset = folder(args.data, decode=None)
        collate, decoder = (
            encoded_collate,
            GPUDecoder(args.image_size, device=device, **cpu_share(args)),
        )
    else:
        import albumentations as A
        from torchvision.transforms import v2

        # antialiased where the crop shrinks, as torchvision's (PIL's) resize
        transform = RandomResizedCrop(args.image_size)
        if not augment_on_gpu:  # without a GPU, uint8 in the workers is cheapest
            rest = A.Compose([A.HorizontalFlip(), A.ColorJitter(0.2, 0.2, 0.2, hue=0.0)])
            transform = v2.Compose([transform, Albumentations(rest)])
        dataset = folder(args.data, transform=transform)
        collate, decoder = uint8_collate, None
    loader = FastLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        collate_fn=collate, drop_last=True,
    )  # fmt: skip
    on_device = nn.Sequential(gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.2, 0.2, 0.2))
    prefetcher = DataPrefetcher(
        loader, device, mean=MEAN, std=STD, transform=on_device if augment_on_gpu else None,
        decoder=decoder, channels_last=cuda, dtype=dtype,
    )  # fmt: skip
    return prefetcher, len(dataset.classes)


def dali_pipeline(args, device: torch.device):
    """NVIDIA DALI's ImageNet recipe on the same files: the peer users pick for this."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    if not args.data.is_dir():
        raise SystemExit("--dali reads an image folder (its file reader), not an LMDB file")
    cuda = device.type == "cuda"
    threads = available_cpus() if args.workers in ("auto", "tune") else max(1, args.workers)
    # DALI 2.4 has no bfloat16 output: it hands over float16 then, and says so
    dtype = {"float32": types.FLOAT, "float16": types.FLOAT16}.get(
        args.dtype, getattr(types, "BFLOAT16", types.FLOAT16)
    )
    args.dali_dtype = str(dtype).rsplit(".", 1)[-1].lower()
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    decode_options = {"hw_decoder_load": args.hw_decoder_load} if cuda else {}

    @pipeline_def(
        batch_size=args.batch_size, num_threads=threads,
        device_id=(device.index or 0) if cuda else None, seed=rank + 1,
    )  # fmt: skip
    def pipeline():
        jpegs, labels = fn.readers.file(
            file_root=str(args.data), random_shuffle=True, name="Reader",
            shard_id=rank, num_shards=world,
        )  # fmt: skip
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed" if cuda else "cpu", output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], **decode_options,
        )  # fmt: skip
        images = fn.resize(images, size=[args.image_size] * 2, antialias=True)
        images = fn.crop_mirror_normalize(
            images, dtype=dtype, output_layout="HWC", mean=[255 * m for m in MEAN],
            std=[255 * s for s in STD], mirror=fn.random.coin_flip(),
        )  # fmt: skip
        return images, labels.gpu() if cuda else labels

    iterator = DALIGenericIterator(
        pipeline(), ["image", "label"], reader_name="Reader",
        last_batch_policy=LastBatchPolicy.DROP, auto_reset=True,
    )  # fmt: skip
    classes = sorted(entry.name for entry in args.data.iterdir() if entry.is_dir())

    class Batches:
        def __iter__(self):
            for (batch,) in iterator:  # NHWC is NCHW in channels_last memory: a view
                yield batch["image"].permute(0, 3, 1, 2), batch["label"].squeeze(-1).long()

        def __len__(self):
            return len(iterator)

    return Batches(), len(classes)


def baseline_pipeline(args, device: torch.device):
    from torchvision import transforms as T

    dataset = torchvision.datasets.ImageFolder(
        str(args.data),
        T.Compose([
            T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
            T.ColorJitter(0.2, 0.2, 0.2), T.ToTensor(), T.Normalize(MEAN, STD),
        ]),
    )  # fmt: skip
    sampler = DistributedSampler(dataset) if dist.is_initialized() else None
    workers = 2 if args.workers == "auto" else int(args.workers)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        num_workers=workers, pin_memory=device.type == "cuda", drop_last=True,
        persistent_workers=workers > 0,  # a fair baseline keeps its workers too
    )  # fmt: skip

    class ToDevice:
        def __iter__(self):
            if sampler is not None:
                sampler.set_epoch(self.epoch)
                self.epoch += 1
            for images, labels in loader:
                yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)

        epoch = 0

        def __len__(self):
            return len(loader)

        def close(self) -> None:
            """Ends the workers once the epochs are measured: on the GPU image (torch 2.11),
            the DataLoader's own shutdown joined each pinned-memory worker for its whole 5-s
            timeout, which cost the plan's budget, not the measured epochs."""
            for worker in getattr(loader._iterator, "_workers", ()):
                worker.terminate()

    return ToDevice(), len(dataset.classes)


class CachedBatch:
    """``batch``, ``steps`` times an epoch: what the step costs with loading free."""

    def __init__(self, batch, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __iter__(self):
        return (self.batch for _ in range(self.steps))

    def __len__(self) -> int:
        return self.steps


def timeline(events: StepEvents, sizes: list[int]) -> dict[str, float | None]:
    """The epoch's fill (seconds until the GPU reached the first step) and its steady rate:
    images/s over the steps after the first tenth (at least the first one)."""
    times = events.step_seconds()
    skip = max(1, len(times) // 10)
    if len(times) <= skip:
        return {"fill_seconds": times[0][0] if times else None, "steady_images_per_second": None}
    steady = times[-1][1] - times[skip - 1][1]
    return {
        "fill_seconds": times[0][0],
        "steady_images_per_second": sum(sizes[skip:]) / steady if steady > 0 else None,
    }


def describe(metrics: dict) -> str:
    """One epoch's metrics as a line for people."""
    wait = metrics["data_wait_fraction"]
    return (
        f"epoch {metrics['epoch']}: {metrics['images_per_second']:,.0f} images/s, "
        + (f"data wait {100 * wait:.1f}%, " if wait is not None else "")
        + f"{1000 * metrics['cpu_seconds_per_image']:.2f} CPU ms/image"
        + (f", loss {metrics['loss']:.3f}" if metrics["loss"] is not None else "")
        + f" ({metrics['pipeline']} on {metrics['device']})"
    )


def measure_epoch(
    epoch: int, batches, step, pipeline: str, device: torch.device, steps: int | None
) -> dict:
    """One epoch through ``batches`` (a step on each batch unless ``step`` is None): its rate,
    data wait, CPU time per image (this process and workers, and each thread of this one),
    and on a GPU its fill and steady rate."""
    cuda = device.type == "cuda"
    # On a GPU: events around each step, read after the epoch (the host runs ahead);
    # on a CPU: the loop's own wait for each batch.
    threads_start = thread_cpu()
    events = StepEvents(device) if cuda and step is not None else None
    loop = timed(batches) if not cuda else batches
    start, cpu_start, images = time.perf_counter(), cpu_seconds_with_workers(), 0
    loss, sizes = None, []
    for index, (x, y) in enumerate(loop):
        if step is not None:
            if events is not None:
                events.started()
            loss = step(x, y)
            if events is not None:
                events.ended()
        images += len(y)
        sizes.append(len(y))
        if steps is not None and index + 1 >= steps:
            break
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    if step is None:
        wait = None
    elif events is not None:
        wait = events.idle_fraction() if events.steps > 1 else None
    else:
        wait = loop.summary().wait_fraction
    metrics = {
        "pipeline": pipeline,
        "epoch": epoch,
        "images_per_second": images / seconds,
        "data_wait_fraction": wait,
        "data_wait_measure": "GPU idle between steps (CUDA events)" if cuda else "host wait",
        "cpu_seconds_per_image": (cpu_seconds_with_workers() - cpu_start) / images,
        "loss": None if loss is None else float(loss.detach()),
        "device": str(device),
        "thread_cpu_ms_per_image": {
            name: 1000 * cpu / images for name, cpu in (thread_cpu() - threads_start).items()
        },
    }
    if events is not None:
        metrics |= timeline(events, sizes)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", type=Path, help="image folder, or LMDB file (fastload only)")
    parser.add_argument("--baseline", action="store_true", help="plain torchvision + DataLoader")
    parser.add_argument("--dali", action="store_true", help="NVIDIA DALI's pipeline (a peer)")
    parser.add_argument(
        "--cached", action="store_true",
        help="the step alone: fastload's first batch, trained on for a whole epoch (the ceiling)",
    )  # fmt: skip
    parser.add_argument(
        "--hw-decoder-load", type=float, default=0.65,
        help="--dali on a GPU: the share of images for the hardware JPEG decoder",
    )  # fmt: skip
    parser.add_argument(
        "--decode",
        choices=["cpu", "gpu", "gpu-fused"],
        default="cpu",
        help="gpu: nvJPEG, for few CPU cores per GPU; gpu-fused: the decoder also crops, "
        "flips and normalises",
    )
    parser.add_argument(
        "--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
        help="the batch's dtype as the pipeline hands it over",
    )  # fmt: skip
    parser.add_argument(
        "--cpu-share", type=float, default=0.0,
        help="--decode gpu/gpu-fused: GPUDecoder's cpu_share, the JPEGs OpenCV decodes beside it",
    )  # fmt: skip
    parser.add_argument(
        "--augment", choices=["cpu", "gpu"], default=None, help="default: gpu with CUDA"
    )
    parser.add_argument("--model", default="resnet18", help="a torchvision model, or none")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--workers", default="auto", help="int, auto or tune")
    parser.add_argument("--steps", type=int, default=None, help="at most this many steps an epoch")
    parser.add_argument(
        "--json", action="store_true", help="print the last epoch's metrics as JSON"
    )
    parser.add_argument(
        "--serve", action="store_true",
        help="run no epoch until told: read an epoch count a line from standard input, run "
        f"them (on a GPU: and the JPEG engines' use over them), print {READY!r}; end at the "
        "input's end (end_to_end.py's rounds, one start)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.workers not in ("auto", "tune"):
        args.workers = int(args.workers)

    distributed = "RANK" in os.environ  # set by torchrun
    if distributed and args.serve:
        parser.error("--serve runs alone: under torchrun each rank would wait on its own input")
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    args.augment = args.augment or ("gpu" if device.type == "cuda" else "cpu")
    if args.dali:
        batches, classes = dali_pipeline(args, device)
        where = "mixed" if device.type == "cuda" else "cpu"
        pipeline = f"NVIDIA DALI ({where} decode, {args.dali_dtype} out)"
    elif args.baseline:
        batches, classes = baseline_pipeline(args, device)
        pipeline = "baseline"
    else:
        batches, classes = fastload_pipeline(args, device)
        pipeline = f"fastload ({args.decode} decode, {args.augment} augmentation)"
    if args.cached:  # as many steps as an epoch, on one batch already on the device
        batches, pipeline = CachedBatch(next(iter(batches)), len(batches)), "the step alone"

    step = None
    if args.model != "none":
        model = getattr(torchvision.models, args.model)(num_classes=classes).to(device)
        model = model.to(memory_format=torch.channels_last)
        if distributed:
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[local_rank] if device.type == "cuda" else None
            )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5)

        # bf16 on a GPU; on a CPU too when the batch comes in half precision
        mixed_precision = device.type == "cuda" or args.dtype != "float32"

        def step(images, labels):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision):
                loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss

    rank = dist.get_rank() if distributed else 0
    done = 0

    def run_epochs(count: int) -> None:
        nonlocal done
        for epoch in range(done, done + count):
            metrics = measure_epoch(epoch, batches, step, pipeline, device, args.steps)
            if rank == 0:
                print(json.dumps(metrics) if args.json else describe(metrics), flush=True)
        done += count

    if args.serve:  # rounds on request: the start is paid once, not once a round
        print(READY, flush=True)
        for line in sys.stdin:
            if device.type == "cuda":  # the JPEG engines' use over the round's epochs
                with EngineSampler() as engines:
                    run_epochs(int(line))
                print(json.dumps({"jpeg_engines": engines.stats()}), flush=True)
                torch.cuda.empty_cache()  # an idle variant leaves the memory to the others
            else:
                run_epochs(int(line))
            print(READY, flush=True)
    else:
        run_epochs(args.epochs)
    if hasattr(batches, "close"):  # the baseline's DataLoader (FastLoader ends its own)
        batches.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
