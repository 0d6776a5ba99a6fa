"""The ``fastload`` command line."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> None:
    from fastload.demo import run_demo

    print(run_demo(images_per_class=args.images_per_class, repeats=args.repeats))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastload", description="Keep the GPU fed.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what fastload chooses")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="compare DataLoader and FastLoader on generated JPEGs")
    demo.add_argument("--images-per-class", type=int, default=16)
    demo.add_argument("--repeats", type=int, default=3)
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    args.run(args)


if __name__ == "__main__":
    main()
