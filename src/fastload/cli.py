"""The ``fastload`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> None:
    from fastload.demo import run_demo

    print(run_demo(images_per_class=args.images_per_class, repeats=args.repeats))


def _convert(args: argparse.Namespace) -> None:
    from fastload.lmdb import write_lmdb

    meta = write_lmdb(
        args.source,
        args.destination,
        resume=args.resume,
        skip_bad=args.skip_bad,
        resize=args.resize,
        quality=args.quality,
        workers=args.workers,
    )
    skipped = f", {len(meta['skipped'])} skipped" if meta["skipped"] else ""
    print(f"{args.destination}: {meta['count']} records{skipped}")


def _info(args: argparse.Namespace) -> None:
    from fastload.lmdb import LMDBDataset

    meta = LMDBDataset(args.database).meta
    size = args.database.stat().st_size
    print(json.dumps(meta | {"file_bytes": size}, indent=2))


def _verify(args: argparse.Namespace) -> None:
    from fastload.lmdb.verify import verify_lmdb

    report = verify_lmdb(args.database)
    for problem in report.problems:
        print(problem)
    print(f"{args.database}: {report.checked} of {report.count} records verified")
    if not report.ok:
        sys.exit(1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastload", description="Keep the GPU fed.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what fastload chooses")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="compare DataLoader and FastLoader on generated JPEGs")
    demo.add_argument("--images-per-class", type=int, default=16)
    demo.add_argument("--repeats", type=int, default=3)
    demo.set_defaults(run=_demo)

    convert = commands.add_parser("convert", help="write an image folder into one LMDB file")
    convert.add_argument("source", type=Path, help="image folder with one sub-folder per class")
    convert.add_argument("destination", type=Path, help="database file to create")
    convert.add_argument("--resume", action="store_true", help="finish an interrupted conversion")
    convert.add_argument(
        "--skip-bad", action="store_true", help="skip (and list) unreadable images"
    )
    convert.add_argument(
        "--resize", type=int, metavar="N", help="presize: longest side to N pixels"
    )
    convert.add_argument("--quality", type=int, metavar="Q", help="JPEG quality when re-encoding")
    convert.add_argument("--workers", type=int, help="reader processes (default: all CPUs)")
    convert.set_defaults(run=_convert)

    info = commands.add_parser("info", help="print a database's metadata")
    info.add_argument("database", type=Path)
    info.set_defaults(run=_info)

    verify = commands.add_parser("verify", help="read, check and decode every record")
    verify.add_argument("database", type=Path)
    verify.set_defaults(run=_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    try:
        args.run(args)
    except (OSError, ValueError) as error:  # bad input: one clear line, not a traceback
        parser.exit(2, f"fastload {args.command}: error: {error}\n")


if __name__ == "__main__":
    main()
