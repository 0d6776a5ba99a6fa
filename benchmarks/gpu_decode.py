"""End to end, LMDB bytes to a normalised, augmented NCHW batch on the device:
JPEG decoding in CPU workers vs decoding on the GPU.

- CPU decode: LMDBDataset (OpenCV decode) + albumentations RandomResizedCrop 224 and
  flip in 2 workers, uint8_collate, DataPrefetcher normalising on the device.
- GPU decode: LMDBDataset(decode=None) (workers only read bytes), encoded_collate,
  DataPrefetcher(decode=GPUDecoder(224)) with a per-sample flip on the device.

Reports images/s and CPU seconds per image (this process and its workers, from
getrusage; workers are not persistent so that their time is counted). Without CUDA
the "GPU" decoder runs its CPU path (OpenCV in a thread pool): the table says so.

Usage:
    python benchmarks/gpu_decode.py [--batch-size 64] [--repeats 3] [--plot]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import albumentations as A
import torch

from common import Row, device_name, plot, report
from data import jpeg_folder
from fastload import DataPrefetcher, FastLoader, LMDBDataset, gpu, write_lmdb
from fastload.lmdb.store import close_reader
from fastload.timing import Measurement
from fastload.transforms import Albumentations, encoded_collate, uint8_collate

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pipelines(database: Path, batch_size: int, device: torch.device) -> dict[str, DataPrefetcher]:
    augment = Albumentations(A.Compose([A.RandomResizedCrop((224, 224)), A.HorizontalFlip()]))
    cpu_loader = FastLoader(
        LMDBDataset(database, transform=augment),
        batch_size=batch_size,
        num_workers=2,
        persistent_workers=False,
        collate_fn=uint8_collate,
    )
    bytes_loader = FastLoader(
        LMDBDataset(database, decode=None),
        batch_size=batch_size,
        num_workers=2,
        persistent_workers=False,
        collate_fn=encoded_collate,
    )
    where = "GPU" if device.type == "cuda" else "CPU thread pool: no GPU"
    return {
        "CPU decode in 2 workers": DataPrefetcher(cpu_loader, device, mean=MEAN, std=STD),
        f"GPUDecoder ({where})": DataPrefetcher(
            bytes_loader,
            device,
            decode=gpu.GPUDecoder(224, device=device),
            transform=gpu.RandomHorizontalFlip(),
            mean=MEAN,
            std=STD,
        ),
    }


def epoch(prefetcher: DataPrefetcher, device: torch.device) -> tuple[float, float, int]:
    start_wall, start_cpu, images = time.perf_counter(), cpu_seconds(), 0
    for batch, _labels in prefetcher:
        images += len(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start_wall, cpu_seconds() - start_cpu, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    work = Path(tempfile.mkdtemp(prefix="fastload-bench-"))
    database = work / "train.lmdb"
    try:
        write_lmdb(jpeg_folder(), database, progress=False)
        rows = []
        for name, prefetcher in pipelines(database, args.batch_size, device).items():
            epoch(prefetcher, device)  # warm-up
            runs = [epoch(prefetcher, device) for _ in range(args.repeats)]
            wall = Measurement(tuple(seconds for seconds, _, _ in runs))
            images = runs[0][2]
            cpu = sorted(cpu for _, cpu, _ in runs)[len(runs) // 2]
            extra = {
                "CPU ms/image": f"{1000 * cpu / images:.2f}",
                "CPU cores busy": f"{cpu / wall.median:.1f}",
            }
            rows.append(Row(name, wall, images, extra))
        fallback = "" if device.type == "cuda" else ": CPU fallback, no GPU figure"
        print(f"device: {device_name()}{fallback}")
        result = report(
            "gpu_decode",
            rows,
            baseline=rows[0].name,
            unit="images",
            settings=vars(args) | {"device": str(device), "output": "224x224 float32, normalised"},
        )
    finally:
        close_reader(database)
        shutil.rmtree(work)
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
