"""The ``fastload`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastload.datasets.folder import ImageFolder
    from fastload.lmdb import LMDBDataset

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> None:
    from fastload.tools.demo import run_demo

    run_demo(
        images_per_class=args.images_per_class,
        repeats=args.repeats,
        plot=args.plot,
        say=lambda text: print(text, flush=True),
    )


def _convert(args: argparse.Namespace) -> None:
    from fastload.lmdb import write_lmdb

    if args.shards:
        _convert_to_shards(args)
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


def _convert_to_shards(args: argparse.Namespace) -> None:
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
    print(f"{args.destination}: {meta['samples']} samples in shards{skipped}")


def _byte_size(value: str) -> int:
    """``256MB``, ``1GB``, ``500kB`` or plain bytes."""
    units = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "b": 1}
    text = value.strip().lower()
    for unit, factor in units.items():
        if text.endswith(unit) and text[: -len(unit)].strip().replace(".", "", 1).isdigit():
            size = int(float(text[: -len(unit)]) * factor)
            break
    else:
        size = int(text) if text.isdigit() else 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be a size such as 256MB or 1GB, got {value!r}")
    return size


def _source(text: str) -> str | Path:
    """A command's DATABASE: an ``s3://`` URL as it is (a Path would mangle it), else a path."""
    from fastload.shards.remote import is_remote

    return text if is_remote(text) else Path(text)


def _is_shard_set(path: str | Path) -> bool:
    """A shard set in object storage, or a folder of shards (indexed, scannable or being
    written); LMDB's otherwise."""
    from fastload.shards.index import INDEX, PROGRESS

    if isinstance(path, str):
        return True
    return path.is_dir() and (
        (path / INDEX).exists() or (path / PROGRESS).exists() or any(path.glob("*.tar"))
    )


def _info(args: argparse.Namespace) -> None:
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


def _index(args: argparse.Namespace) -> None:
    from fastload.shards.index import INDEX, load_index
    from fastload.shards.scan import index_webdataset

    if not args.folder.is_dir():
        raise FileNotFoundError(f"{args.folder}: no such folder")
    if (args.folder / INDEX).exists():
        raise FileExistsError(f"{args.folder / INDEX} exists; it is left as it is")
    path = index_webdataset(args.folder)
    shards, meta = load_index(args.folder)
    print(f"{path}: {meta['samples']} samples in {len(shards)} shards")


def _verify(args: argparse.Namespace) -> None:
    from fastload.lmdb.verify import verify_lmdb

    if _is_shard_set(args.database):
        from fastload.decode.opencv import ImageDecodeError
        from fastload.shards import ShardedDataset
        from fastload.shards.index import ShardIndexError

        dataset = ShardedDataset(args.database)
        try:
            dataset.verify()  # every shard's SHA-256
            for index in range(len(dataset)):
                dataset[index]  # every sample decodes
        except (ShardIndexError, ImageDecodeError) as error:
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
            "diagnose and bench augment with albumentations: pip install 'fastload[augment]'"
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


def _integer(value: str, *, low: int, rule: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{rule}, got {value!r}") from None
    if number < low:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return number


def _num_workers(value: str) -> int | str:
    if value in ("auto", "tune"):
        return value
    return _integer(value, low=0, rule="must be >= 0, auto or tune")


def _positive(value: str) -> int:
    return _integer(value, low=1, rule="must be a positive integer")


def _non_negative(value: str) -> int:
    return _integer(value, low=0, rule="must be >= 0")


def _quality(value: str) -> int:
    quality = _integer(value, low=1, rule="must be a JPEG quality in 1..100")
    if quality > 100:
        raise argparse.ArgumentTypeError(f"must be a JPEG quality in 1..100, got {value}")
    return quality


def _model(value: str) -> str:
    import torchvision

    if value != "none" and value not in torchvision.models.list_models(torchvision.models):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a torchvision classification model (e.g. resnet18, resnet50), "
            "or 'none'"
        )
    return value


def _int_list(low: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers, each >= ``low``."""

    def parse(value: str) -> list[int]:
        rule = f"must be comma-separated integers >= {low}"
        try:
            numbers = [int(part) for part in value.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{rule}, got {value!r}") from None
        if any(number < low for number in numbers):
            raise argparse.ArgumentTypeError(f"{rule}, got {value!r}")
        return numbers

    return parse


def _plot(value: str) -> Path:
    """A plot to write: checked before anything runs, not after a long measurement."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{path} is a directory; give the image file to write, e.g. {path / 'plot.png'}"
        )
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{path.parent}: no such directory to write {path.name} in"
        )
    if not os.access(path.parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path.parent}: cannot write {path.name} there")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ModuleNotFoundError:
        raise argparse.ArgumentTypeError("plots need matplotlib: pip install matplotlib") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise argparse.ArgumentTypeError(
            f"{path.name}: name the plot with one of {', '.join(sorted(formats))} as its extension"
        )
    return path


class _Parser(argparse.ArgumentParser):
    """Errors in one line, exit status 2: ``fastload <command>: error: ...``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _diagnose(args: argparse.Namespace) -> None:
    from fastload.collate import uint8_collate
    from fastload.loader import FastLoader
    from fastload.prefetch import IMAGENET_MEAN, IMAGENET_STD, DataPrefetcher
    from fastload.tools.diagnostics import classifier_step, diagnose

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
    report = diagnose(prefetcher, step, batches=args.batches, warmup=args.warmup, progress=True)
    print(report.to_json() if args.json else report)
    if args.plot is not None and report.timeline is not None:
        from fastload.tools.plots import plot_timeline

        print(f"wrote {plot_timeline(report.timeline, args.plot)}")


def _bench(args: argparse.Namespace) -> None:
    from fastload.collate import uint8_collate
    from fastload.loader import FastLoader
    from fastload.loader.tuning import tune_workers, worker_candidates
    from fastload.system import available_cpus
    from fastload.tools.measure import format_table

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fastload", description="Keep the GPU fed.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what fastload chooses")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = commands.add_parser("demo", help="compare DataLoader and FastLoader on generated JPEGs")
    demo.add_argument("--images-per-class", type=_positive, default=16)
    demo.add_argument("--repeats", type=_positive, default=3)
    demo.add_argument(
        "--plot", type=_plot, default="fastload-demo.png",
        help="PNG of the training loop's wait and step per iteration (default: %(default)s)",
    )  # fmt: skip
    demo.set_defaults(run=_demo)

    convert = commands.add_parser("convert", help="write an image folder into one LMDB file")
    convert.add_argument(
        "source", type=Path,
        help="image folder: one sub-folder per class, or the images of --annotations/--masks",
    )  # fmt: skip
    convert.add_argument(
        "destination",
        help="database file to create (with --shards: a folder or s3://bucket/prefix)",
    )
    convert.add_argument("--resume", action="store_true", help="finish an interrupted conversion")
    convert.add_argument(
        "--skip-bad", action="store_true", help="skip (and list) unreadable images"
    )
    convert.add_argument(
        "--resize", type=_positive, metavar="N", help="presize: longest side to N pixels"
    )
    convert.add_argument(
        "--quality", type=_quality, metavar="Q", help="JPEG quality (1..100) when re-encoding"
    )
    convert.add_argument(
        "--workers", type=_non_negative, help="reader processes (default: all CPUs)"
    )
    targets = convert.add_mutually_exclusive_group()
    targets.add_argument(
        "--annotations", type=Path, metavar="JSON",
        help="COCO-style instances JSON: store boxes, labels, iscrowd, area, image_id",
    )  # fmt: skip
    targets.add_argument(
        "--masks", type=Path, metavar="DIR",
        help="folder of PNG class masks, same relative paths as the images: store mask",
    )  # fmt: skip
    convert.add_argument(
        "--instance-masks", action="store_true",
        help="with --annotations: also each object's mask (needs pycocotools)",
    )  # fmt: skip
    convert.add_argument(
        "--shards", action="store_true",
        help="write tar shards (WebDataset layout) and an index into the folder DEST",
    )  # fmt: skip
    convert.add_argument(
        "--shard-size", type=_byte_size, default=256 << 20, metavar="SIZE",
        help="with --shards: bytes per shard (default 256MB)",
    )  # fmt: skip
    convert.add_argument(
        "--ray", action="store_true",
        help="with --shards: spread the conversion over a Ray cluster (RAY_ADDRESS, or local)",
    )  # fmt: skip
    convert.add_argument(
        "--captions", action="store_true",
        help="with --shards: image-text pairs, SOURCE a folder of images with a .txt beside "
        "each, or a .csv/.jsonl of path and caption",
    )  # fmt: skip
    convert.set_defaults(run=_convert)

    info = commands.add_parser("info", help="print a database's or shard set's metadata")
    info.add_argument("database", type=_source, help="an LMDB file, a shard folder, s3://...")
    info.set_defaults(run=_info)

    index = commands.add_parser(
        "index", help="write index.json beside WebDataset shards (*.tar), read once by all"
    )
    index.add_argument("folder", type=Path, help="a folder of WebDataset .tar shards")
    index.set_defaults(run=_index)

    verify = commands.add_parser(
        "verify", help="read, check and decode every record (shard sets: hashes and samples)"
    )
    verify.add_argument("database", type=_source, help="an LMDB file, a shard folder, s3://...")
    verify.set_defaults(run=_verify)

    diagnose = commands.add_parser(
        "diagnose", help="is data loading the bottleneck? step vs loader vs real loop"
    )
    diagnose.add_argument("data", type=Path, help="image folder or LMDB file")
    diagnose.add_argument("--batch-size", type=_positive, default=64)
    diagnose.add_argument("--image-size", type=_positive, default=224)
    diagnose.add_argument("--batches", type=_positive, default=30)
    diagnose.add_argument("--warmup", type=_non_negative, default=3)
    diagnose.add_argument("--workers", type=_num_workers, default="auto", help="int, auto or tune")
    diagnose.add_argument(
        "--model", type=_model, default="resnet18", help="a torchvision model name, or none"
    )
    diagnose.add_argument("--json", action="store_true", help="print the report as JSON")
    diagnose.add_argument("--plot", type=_plot, help="PNG of each iteration's wait and step")
    diagnose.set_defaults(run=_diagnose)

    bench = commands.add_parser("bench", help="throughput over worker counts and prefetch depth")
    bench.add_argument("data", type=Path, help="image folder or LMDB file")
    bench.add_argument("--batch-size", type=_positive, default=64)
    bench.add_argument("--image-size", type=_positive, default=224)
    bench.add_argument("--batches", type=_positive, default=10)
    bench.add_argument(
        "--workers", type=_int_list(0), default=None,
        help="comma-separated counts (default 0..CPUs)",
    )  # fmt: skip
    bench.add_argument(
        "--prefetch", type=_int_list(1), default=[2, 4], help="comma-separated prefetch factors"
    )
    bench.add_argument("--plot", type=_plot, help="PNG of throughput vs workers")
    bench.set_defaults(run=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run a command. Whatever goes wrong ends in one line on stderr and exit status 2
    (with ``--verbose``, the traceback above it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    try:
        args.run(args)
    except KeyboardInterrupt:
        parser.exit(130, f"fastload {args.command}: interrupted\n")
    except Exception as error:  # one clear line, not a traceback
        if args.verbose:
            traceback.print_exc()
        parser.exit(2, f"fastload {args.command}: error: {_one_line(error)}\n")


def _one_line(error: Exception) -> str:
    """The error's message on one line; its type too where that is not self-evident (a
    bug's AssertionError, KeyError, ...)."""
    text = " ".join(" ".join([str(error), *getattr(error, "__notes__", [])]).split())
    if isinstance(error, (OSError, ValueError, ImportError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


if __name__ == "__main__":
    main()
