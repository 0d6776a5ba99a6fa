"""What each ``fastload`` command does, given its parsed arguments."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastload.tools import arguments

if TYPE_CHECKING:
    from fastload.datasets.folder import ImageFolder
    from fastload.lmdb import LMDBDataset

__all__ = [
    "bench",
    "convert",
    "convert_to_shards",
    "demo",
    "diagnose",
    "index",
    "info",
    "verify",
]


def demo(args: argparse.Namespace) -> None:
    from fastload.tools.demo import run_demo

    run_demo(
        images_per_class=args.images_per_class,
        repeats=args.repeats,
        plot=args.plot,
        say=lambda text: print(text, flush=True),
    )


def _conversion_source(args: argparse.Namespace) -> Any:
    """SOURCE as the writers take it: a path, or for ``hf:PATH`` the Hugging Face set saved
    there (``--hf-split`` of it; ``--hf-image``/``--hf-label`` its columns, else ``image``
    and the first of ``label``, ``labels``, ``objects`` it has)."""
    text = str(args.source)
    named = [f"--hf-{n}" for n in ("split", "image", "label") if getattr(args, f"hf_{n}")]
    if not text.startswith("hf:"):
        if named:
            raise ValueError(f"{named[0]} reads a Hugging Face set: give SOURCE as hf:PATH")
        return args.source
    from fastload.datasets.hf import from_hf
    from fastload.records.hf import load_saved

    dataset = load_saved(text.removeprefix("hf:"), args.hf_split)
    if args.hf_image is None and args.hf_label is None:
        return dataset
    label = None if args.hf_label == "none" else (args.hf_label or "label")
    return from_hf(dataset, image=args.hf_image or "image", label=label, decode=None)


def convert(args: argparse.Namespace) -> None:
    from fastload.lmdb import write_lmdb

    args.source = _conversion_source(args)
    if args.shards:
        convert_to_shards(args)
        return
    if args.ray or args.captions:
        raise ValueError(f"{'--ray' if args.ray else '--captions'} writes shards: add --shards")
    if "://" in args.destination:
        raise ValueError(f"{args.destination}: an LMDB file is written locally; --shards writes "
                         "to a bucket")  # fmt: skip
    meta = write_lmdb(
        args.source,
        args.destination,
        resume=args.resume,
        skip_bad=args.skip_bad,
        resize=args.resize,
        quality=args.quality,
        annotations=args.annotations,
        instance_masks=args.instance_masks,
        masks=args.masks,
        num_workers=args.workers,
    )
    skipped = f", {len(meta['skipped'])} skipped" if meta["skipped"] else ""
    print(f"{args.destination}: {meta['count']} records{skipped}")


def convert_to_shards(args: argparse.Namespace) -> None:
    from fastload.shards import write_shards

    if args.workers is not None:
        raise ValueError("--workers: shards are written by one process, or by --ray's cluster")
    meta = write_shards(
        args.source, args.destination, shard_size=args.shard_size, resume=args.resume,
        skip_bad=args.skip_bad, resize=args.resize, quality=args.quality,
        annotations=args.annotations, instance_masks=args.instance_masks, masks=args.masks,
        ray=args.ray, captions=args.captions,
    )  # fmt: skip
    skipped = f", {len(meta['skipped'])} skipped" if meta["skipped"] else ""
    count = meta["shards"]
    print(f"{args.destination}: {meta['samples']} samples in {count} shard{'s' * (count != 1)}"
          f"{skipped}")  # fmt: skip


def _is_shard_set(path: str | Path) -> bool:
    """A shard set in object storage, or a folder of shards (indexed, scannable or being
    written); LMDB's otherwise."""
    from fastload.shards.format.index import INDEX, PROGRESS

    if isinstance(path, str):
        return True
    return path.is_dir() and (
        (path / INDEX).exists() or (path / PROGRESS).exists() or any(path.glob("*.tar"))
    )


def info(args: argparse.Namespace) -> None:
    from fastload.lmdb import LMDBDataset

    if _is_shard_set(args.database):
        from fastload.shards import ShardedDataset

        dataset = ShardedDataset(args.database)
        sizes = sum(shard.size for shard in dataset.shards)
        print(json.dumps(dataset.meta | {"shards": len(dataset.shards), "bytes": sizes}, indent=2))
        return
    meta = LMDBDataset(args.database).meta
    size = args.database.stat().st_size
    print(json.dumps(meta | {"file_bytes": size}, indent=2))


def index(args: argparse.Namespace) -> None:
    from fastload.shards.format.index import INDEX, clear_temporaries, load_index, refuse_unfinished
    from fastload.shards.format.scan import index_webdataset

    if not args.folder.is_dir():
        raise FileNotFoundError(f"{args.folder}: no such folder")
    refuse_unfinished(args.folder)  # before the scan reads every tar
    if args.upgrade:
        from fastload.shards.format.layout import upgrade_index

        upgraded, count = upgrade_index(args.folder)
        print(f"{upgraded}: version 3, a member table beside each of its {count} shards")
        return
    if (args.folder / INDEX).exists():
        raise FileExistsError(f"{args.folder / INDEX} exists; it is left as it is")
    clear_temporaries(args.folder)  # what an index killed before left
    path = index_webdataset(args.folder)
    shards, meta = load_index(args.folder)
    print(f"{path}: {meta['samples']} samples in {len(shards)} shards")


def verify(args: argparse.Namespace) -> None:
    from fastload.lmdb.verify import verify_lmdb

    if _is_shard_set(args.database):
        from fastload.decode.opencv import ImageDecodeError
        from fastload.records.format import RecordFormatError
        from fastload.shards import ShardedDataset
        from fastload.shards.format.index import ShardIndexError

        try:  # data found bad, exit 1: opening it too (a shard cut short, a table missing)
            dataset = ShardedDataset(args.database)
            dataset.verify()  # every shard's SHA-256
            for index in range(len(dataset)):
                dataset[index]  # every sample decodes
        except (ShardIndexError, RecordFormatError, ImageDecodeError) as error:
            print(error)
            sys.exit(1)
        print(f"{args.database}: {len(dataset.shards)} shards, {len(dataset)} samples verified")
        return
    report = verify_lmdb(args.database)
    for problem in report.problems:
        print(problem)
    print(f"{args.database}: {report.checked} of {report.count} records verified")
    if not report.ok:
        sys.exit(1)


def _image_dataset(data: Path, image_size: int) -> LMDBDataset | ImageFolder:
    """An LMDB file or an image folder, decoded by OpenCV and augmented by albumentations
    (RandomResizedCrop, flip): the CPU pipeline that fastload recommends."""
    try:
        import albumentations as A
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "diagnose and bench augment with albumentations: pip install '.[augment]'"
        ) from error
    from fastload.datasets.folder import ImageFolder
    from fastload.lmdb import LMDBDataset
    from fastload.transforms import Albumentations

    # INTER_AREA where the crop shrinks: antialiased, as torchvision's (PIL's) resize
    crop = A.RandomResizedCrop((image_size, image_size), area_for_downscale="image")
    augment = Albumentations(A.Compose([crop, A.HorizontalFlip()]))
    dataset: LMDBDataset | ImageFolder
    if data.is_file() or (data / "data.mdb").exists():
        dataset = LMDBDataset(data, transform=augment)
        if dataset.fields:
            raise ValueError(
                f"{data}: its records hold targets ({', '.join(dataset.fields)}); diagnose and "
                "bench measure image classification data (images and labels)"
            )
    else:
        dataset = ImageFolder(data, transform=augment)
    if not len(dataset):
        raise ValueError(f"{data}: no images to measure")
    return dataset


def diagnose(args: argparse.Namespace) -> None:
    from fastload.collate import uint8_collate
    from fastload.loader import FastLoader
    from fastload.prefetch import IMAGENET_MEAN, IMAGENET_STD, DataPrefetcher
    from fastload.tools.diagnostics import classifier_step, diagnose

    arguments.check_plot_outside(args.plot, args.data)
    dataset = _image_dataset(args.data, args.image_size)
    classes = len(getattr(dataset, "classes", []) or [])
    if not classes and args.model != "none":
        raise ValueError(
            f"{args.data}: no class names, so no number of classes for --model "
            f"{args.model}'s output; pass --model none to measure the loading alone"
        )
    loader: FastLoader[Any] = FastLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        collate_fn=uint8_collate,
    )  # fmt: skip
    prefetcher = DataPrefetcher(loader, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    step = None if args.model == "none" else classifier_step(args.model, classes, prefetcher.device)
    report = diagnose(
        prefetcher,
        step,
        batches=args.batches,
        warmup=args.warmup,
        seconds=args.seconds,
        progress=True,
    )
    print(report.to_json() if args.json else report)
    if args.plot is not None and report.timeline is not None:
        from fastload.tools.plots import plot_timeline

        print(f"wrote {plot_timeline(report.timeline, args.plot)}")


def bench(args: argparse.Namespace) -> None:
    from fastload.collate import uint8_collate
    from fastload.loader import FastLoader
    from fastload.loader.tuning import tune_workers, worker_candidates
    from fastload.system import available_cpus
    from fastload.tools.measure import format_table

    arguments.check_plot_outside(args.plot, args.data)
    dataset = _image_dataset(args.data, args.image_size)

    def make(workers: int, prefetch: int) -> FastLoader[tuple[Any, Any]]:
        return FastLoader(
            dataset, batch_size=args.batch_size, shuffle=True, num_workers=workers,
            prefetch_factor=prefetch if workers else None, persistent_workers=False,
            collate_fn=uint8_collate,
        )  # fmt: skip

    workers = worker_candidates(available_cpus()) if args.workers is None else args.workers
    prefetch = args.prefetch
    best_workers, best_prefetch, curve = tune_workers(
        make, workers=workers, prefetch=prefetch, batches=args.batches, progress=True
    )
    rows = [
        [w, p if w else "-", f"{rate:.2f}", f"{rate * args.batch_size:,.0f}"]
        for (w, p), rate in sorted(curve.items())
    ]
    print(format_table(["num_workers", "prefetch_factor", "batches/s", "images/s"], rows))
    print(f"best: FastLoader(num_workers={best_workers}, prefetch_factor={best_prefetch})")
    if args.plot is not None:
        from fastload.tools.plots import plot_workers

        print(f"wrote {plot_workers(curve, args.plot)}")
