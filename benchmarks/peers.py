"""Peers: JPEG files to an augmented, normalised float batch on the CPU, fastload against
the libraries people use for it, all in one run.

Every pipeline does the same work: RandomResizedCrop to ``--image-size`` (scale 0.08-1,
ratio 3/4-4/3, antialiased where it shrinks, as PIL does), a random horizontal flip,
ImageNet normalisation, float32 N x 3 x S x S batches of ``--batch-size`` with labels,
``--workers`` worker processes or threads, on ``--images`` photo-like 500x375 JPEGs.

- classic (the baseline): torchvision ImageFolder + PIL transforms + DataLoader,
  persistent workers;
- torchvision v2: ``decode_jpeg`` + v2 transforms on tensors + DataLoader;
- torchdata.nodes: the same v2 per-sample function, in threads;
- NVIDIA DALI: its CPU-only pipeline (``device_id=None``): ``image_random_crop``
  decode, antialiased ``resize``, ``crop_mirror_normalize``;
- FFCV: its own file (the JPEGs re-encoded at quality 90 by FFCV's writer), its
  ``RandomResizedCropRGBImageDecoder`` (OpenCV ``INTER_AREA``), flip, ``NormalizeImage``;
- fastload: ImageFolder or LMDBDataset (OpenCV decode), ``fastload.transforms.
  RandomResizedCrop`` (torch's antialiased uint8 resize, on a view of the decoded array)
  and v2's flip in FastLoader's workers, DataPrefetcher normalising on the CPU;
- fastload, crop-aware: the folder's bytes to the same ``RandomResizedCrop``, which
  decodes only what its box needs (a reduced JPEG scale, or the box's region with
  nvImageCodec installed);
- fastload with threads for worker processes (torchdata.nodes runs them): the same
  dataset and normalisation;
- fastload for a GPU machine: the same files to uint8 batches (the GPU normalises them);
- decode + crop alone: one process, no loader, the floor any pipeline pays.

Each variant runs in its own process; rounds are interleaved (every variant once, then
again); each process runs ``--epochs`` epochs and the first is a warm-up. The table holds
medians over the timed epochs: images/s, its ratio to the classic baseline, CPU ms per
image (the process, its threads and its worker processes). A peer that does not install
is reported with the reason.

Usage:
    python benchmarks/peers.py [--images 1000] [--epochs 4] [--rounds 3] [--workers 2]
        [--batch-size 64] [--image-size 224] [--only DALI,FFCV,...] [--plot]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, plot, report, results_folder
from benchmarks.lib.data import DATA, data_sets
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASELINE = "classic: torchvision ImageFolder + PIL + DataLoader"
Pipeline = Callable[[argparse.Namespace], Iterable]


def classic(args) -> Iterable:
    from torchvision import datasets
    from torchvision import transforms as T

    transform = T.Compose([
        T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize(MEAN, STD),
    ])  # fmt: skip
    return _data_loader(datasets.ImageFolder(str(args.folder), transform), args)


def _v2_sample(args) -> Callable[[tuple[str, int]], tuple[torch.Tensor, int]]:
    """File path and label to the v2-augmented float image and the label."""
    from torchvision.io import decode_jpeg, read_file
    from torchvision.transforms import v2

    transform = v2.Compose([
        v2.RandomResizedCrop(args.image_size, antialias=True), v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
    ])  # fmt: skip

    def sample(item: tuple[str, int]) -> tuple[torch.Tensor, int]:
        path, label = item
        return transform(decode_jpeg(read_file(path))), label

    return sample


class _Mapped(torch.utils.data.Dataset):
    def __init__(self, items: list, fn: Callable) -> None:
        self.items, self.fn = items, fn

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.fn(self.items[index])


def _files(args) -> list[tuple[str, int]]:
    from torchvision import datasets

    return datasets.ImageFolder(str(args.folder)).samples


def _data_loader(dataset, args) -> Iterable:
    from torch.utils.data import DataLoader

    return DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        persistent_workers=True, drop_last=True,
    )  # fmt: skip


def torchvision_v2(args) -> Iterable:
    return _data_loader(_Mapped(_files(args), _v2_sample(args)), args)


def _in_threads(args, sample: Callable[[int], tuple], count: int, collate: Callable) -> Iterable:
    """torchdata.nodes: ``sample(index)`` in ``--workers`` threads, batched, collated."""
    from torch.utils.data import RandomSampler
    from torchdata import nodes

    node = nodes.SamplerWrapper(RandomSampler(range(count)))
    node = nodes.ParallelMapper(node, map_fn=sample, num_workers=args.workers, method="thread")
    node = nodes.Batcher(node, batch_size=args.batch_size, drop_last=True)
    return nodes.Loader(nodes.Prefetcher(nodes.Mapper(node, collate), prefetch_factor=2))


def torchdata_nodes(args) -> Iterable:
    from torch.utils.data import default_collate

    files, sample = _files(args), _v2_sample(args)
    return _in_threads(args, lambda index: sample(files[index]), len(files), default_collate)


def fastload_threads(args) -> Iterable:
    """fastload's dataset and normalisation with threads (torchdata.nodes) for workers."""
    from fastload import DataPrefetcher
    from fastload.collate import uint8_collate

    dataset = _fastload_dataset(args, args.folder)
    torch.set_num_threads(1)  # the threads are the parallelism
    threads = _in_threads(args, dataset.__getitem__, len(dataset), uint8_collate)
    return DataPrefetcher(threads, "cpu", mean=MEAN, std=STD)


def dali(args) -> Iterable:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=args.batch_size, num_threads=args.workers, device_id=None)
    def pipeline():
        jpegs, labels = fn.readers.file(
            file_root=str(args.folder), random_shuffle=True, name="Reader"
        )
        images = fn.decoders.image_random_crop(
            jpegs, device="cpu", output_type=types.RGB, random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
        )  # fmt: skip
        images = fn.resize(images, size=[args.image_size] * 2, antialias=True)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=[255 * m for m in MEAN],
            std=[255 * s for s in STD], mirror=fn.random.coin_flip(),
        )  # fmt: skip
        return images, labels

    return DALIGenericIterator(
        pipeline(), ["image", "label"], reader_name="Reader",
        last_batch_policy=LastBatchPolicy.DROP, auto_reset=True,
    )  # fmt: skip


def ffcv(args) -> Iterable:
    import numpy as np
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import (
        NormalizeImage,
        RandomHorizontalFlip,
        Squeeze,
        ToTensor,
        ToTorchImage,
    )

    pipelines = {
        "image": [
            RandomResizedCropRGBImageDecoder((args.image_size, args.image_size)),
            RandomHorizontalFlip(),
            NormalizeImage(255 * np.array(MEAN), 255 * np.array(STD), np.float32),
            ToTensor(),
            ToTorchImage(),
        ],
        "label": [IntDecoder(), ToTensor(), Squeeze()],
    }
    return Loader(
        str(_ffcv_file(args.folder)), batch_size=args.batch_size, num_workers=args.workers,
        order=OrderOption.RANDOM, drop_last=True, pipelines=pipelines,
    )  # fmt: skip


def _ffcv_file(folder: Path) -> Path:
    """FFCV's own file of the folder's images, written once (FFCV's writer re-encodes)."""
    path = DATA / f"{folder.name}.beton"
    if not path.exists():
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter
        from torchvision import datasets

        partial = path.with_suffix(".partial")
        fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
        DatasetWriter(str(partial), fields, num_workers=2).from_indexed_dataset(
            datasets.ImageFolder(str(folder))
        )
        partial.rename(path)  # a cut-off write is never taken for a finished file
    return path


def _fastload_dataset(args, data: Path, *, decode: str | None = "numpy"):
    from torchvision.transforms import v2

    from fastload import ImageFolder, LMDBDataset
    from fastload.transforms import RandomResizedCrop

    crop = v2.Compose([RandomResizedCrop(args.image_size), v2.RandomHorizontalFlip()])
    dataset = ImageFolder if data.is_dir() else LMDBDataset
    return dataset(data, transform=crop, decode=decode)


def _fastload(
    args, data: Path, *, normalise: bool = True, decode: str | None = "numpy"
) -> Iterable:
    from fastload import DataPrefetcher, FastLoader
    from fastload.collate import uint8_collate

    loader = FastLoader(
        _fastload_dataset(args, data, decode=decode), batch_size=args.batch_size, shuffle=True,
        num_workers=args.workers, collate_fn=uint8_collate, drop_last=True,
    )  # fmt: skip
    return DataPrefetcher(loader, "cpu", mean=MEAN, std=STD) if normalise else loader


def fastload_folder(args) -> Iterable:
    return _fastload(args, args.folder)


def fastload_lmdb(args) -> Iterable:
    return _fastload(args, args.database)


def fastload_crop_aware(args) -> Iterable:
    """Bytes in: RandomResizedCrop decodes only what its box needs (a reduced JPEG scale,
    or with nvImageCodec installed the box's region)."""
    return _fastload(args, args.folder, decode=None)


def fastload_uint8(args) -> Iterable:
    return _fastload(args, args.folder, normalise=False)


def decode_and_crop(args) -> Iterable:
    """No loader: one image after another in this process, batches of uint8 crops."""
    from fastload.collate import uint8_collate

    dataset = _fastload_dataset(args, args.folder)
    torch.set_num_threads(1)

    def epoch():
        order = torch.randperm(len(dataset)).tolist()
        for start in range(0, len(order) - args.batch_size + 1, args.batch_size):
            yield uint8_collate(
                [dataset[index] for index in order[start : start + args.batch_size]]
            )

    class Epochs:
        def __iter__(self):
            return epoch()

    return Epochs()


PIPELINES: dict[str, Pipeline] = {
    BASELINE: classic,
    "torchvision v2: decode_jpeg + v2 transforms + DataLoader": torchvision_v2,
    "torchdata.nodes: v2 transforms in threads": torchdata_nodes,
    "NVIDIA DALI: CPU pipeline": dali,
    "FFCV": ffcv,
    "fastload: image folder": fastload_folder,
    "fastload: LMDB": fastload_lmdb,
    "fastload: image folder, crop-aware decode (bytes in)": fastload_crop_aware,
    "fastload: image folder, torchdata.nodes threads for workers": fastload_threads,
    "fastload for a GPU: uint8 batches, not normalised": fastload_uint8,
    "decode + crop alone: one process, no loader": decode_and_crop,
}


def measure(name: str, args) -> None:
    """In the variant's own process: ``--epochs`` epochs, one JSON line each."""
    batches = PIPELINES[name](args)
    for epoch in range(args.epochs):
        start, cpu, images = time.perf_counter(), cpu_seconds_with_workers(), 0
        for batch in batches:
            images += len(batch[0]["image"] if isinstance(batch[0], dict) else batch[0])
        seconds = time.perf_counter() - start
        cpu = cpu_seconds_with_workers() - cpu
        print(json.dumps({"epoch": epoch, "images": images, "seconds": seconds, "cpu": cpu}))


def run(name: str, args) -> list[dict]:
    command = [sys.executable, __file__, "--variant", name, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        print(f"{name}:\n{done.stderr[-2000:]}", file=sys.stderr)
        raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
    epochs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return epochs[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=4, help="per process, the first untimed")
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant")
    parser.add_argument("--workers", type=int, default=2, help="worker processes or threads")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument(
        "--only", default=None,
        help="run the variants whose names contain one of these comma-separated words",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    args.folder, args.database = data_sets(args.images, "synthetic")
    if args.variant is not None:
        measure(args.variant, args)
        return

    wanted = None if args.only is None else args.only.split(",")
    names = [name for name in PIPELINES if wanted is None or any(w in name for w in wanted)]
    if args.only is not None and BASELINE not in names:
        names.insert(0, BASELINE)
    if "FFCV" in names:
        try:
            _ffcv_file(args.folder)
        except ImportError as error:
            print(f"FFCV is not installed: {error}", file=sys.stderr)
    measured: dict[str, list[dict] | str] = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names:
            if isinstance(measured[name], str):
                continue
            try:
                measured[name] += run(name, args)
            except RuntimeError as error:  # its process failed; the last line says why
                measured[name] = _why_not(str(error))
            except subprocess.TimeoutExpired:
                measured[name] = f"failed: over the {args.timeout:.0f} s limit per process"
        result = write_report(args, measured)
        print(f"round {round_index + 1} of {args.rounds} done", flush=True)
    if args.plot:
        plot(result)


def _why_not(error: str) -> str:
    if "ModuleNotFoundError" in error or "ImportError" in error:
        return f"not installed here: {error}"
    return f"failed: {error}"


def write_report(args, measured: dict[str, list[dict] | str]) -> Path:
    rows = []
    for name, epochs in measured.items():
        if isinstance(epochs, str) or not epochs:
            rows.append(Row(name, None, 1, note=epochs or "not run yet"))
            continue
        per_image = tuple(epoch["seconds"] / epoch["images"] for epoch in epochs)
        cpu = statistics.median(epoch["cpu"] / epoch["images"] for epoch in epochs)
        extra = {"CPU ms/image": f"{1000 * cpu:.2f}"}
        rows.append(Row(name, Measurement(per_image), 1, extra))
    settings = {
        key: value for key, value in vars(args).items() if key not in ("out", "variant", "only")
    }
    return report(
        "peers", rows, baseline=BASELINE, unit="images", out=args.out,
        settings=settings | {"data": f"{args.images} photo-like JPEG 500x375, quality 90"},
    )  # fmt: skip


if __name__ == "__main__":
    main()
