"""The ``fastload`` command line."""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import logging
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from fastload.tools import arguments, commands

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """Errors in one line, exit status 2: ``fastload <command>: error: ...``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
        option_string: str | None = None,
    ) -> None:  # fmt: skip
        print(parser.prog, importlib.metadata.version("fastload"))  # on stdout, as --help
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``fastload`` command line: one function per subcommand below, the options two
    of them share defined once (:func:`_add_source`, :func:`_add_batch_options`)."""
    parser = _Parser(prog="fastload", description="Keep the GPU fed.")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what fastload chooses")
    subcommands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_demo, _convert, _info, _index, _verify, _diagnose, _bench):
        add(subcommands)
    return parser


Subcommands: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "database",
        type=arguments.source,
        help="an LMDB file, a shard folder, s3://, gs://, az://, https://...",
    )


def _add_batch_options(parser: argparse.ArgumentParser) -> None:
    """The data a measuring command reads, and the batches it makes of it."""
    parser.add_argument("data", type=Path, help="image folder or LMDB file")
    parser.add_argument(
        "--batch-size",
        type=arguments.positive,
        default=64,
        help="images per batch, as your training uses (default: %(default)s)",
    )
    parser.add_argument(
        "--image-size",
        type=arguments.positive,
        default=224,
        help="side of the random resized crop (default: %(default)s)",
    )


def _demo(subcommands: Subcommands) -> None:
    demo = subcommands.add_parser(
        "demo", help="compare DataLoader and FastLoader on generated JPEGs"
    )
    demo.add_argument(
        "--images-per-class",
        type=arguments.positive,
        default=16,
        help="generated JPEGs per class, 8 classes (default: %(default)s)",
    )
    demo.add_argument(
        "--repeats",
        type=arguments.positive,
        default=3,
        help="timed epochs of each pipeline, after a warm-up (default: %(default)s)",
    )
    demo.add_argument(
        "--plot",
        type=arguments.plot,
        default="fastload-demo.png",
        help="PNG of the training loop's wait and step per iteration (default: %(default)s)",
    )
    demo.set_defaults(run=commands.demo)


def _convert(subcommands: Subcommands) -> None:
    convert = subcommands.add_parser("convert", help="write an image folder into one LMDB file")
    convert.add_argument(
        "source",
        type=Path,
        help="image folder: one sub-folder per class, or the images of --annotations/--masks; "
        "hf:PATH for a Hugging Face set saved with save_to_disk",
    )
    convert.add_argument(
        "destination",
        help="database file to create (with --shards: a folder, s3://, gs:// or az://bucket/prefix)",
    )
    convert.add_argument("--resume", action="store_true", help="finish an interrupted conversion")
    convert.add_argument(
        "--skip-bad", action="store_true", help="skip (and list) unreadable images"
    )
    convert.add_argument(
        "--resize", type=arguments.positive, metavar="N", help="presize: longest side to N pixels"
    )
    convert.add_argument(
        "--quality",
        type=arguments.quality,
        metavar="Q",
        help="JPEG quality (1..100) when re-encoding",
    )
    convert.add_argument(
        "--workers", type=arguments.non_negative, help="reader processes (default: all CPUs)"
    )
    targets = convert.add_mutually_exclusive_group()
    targets.add_argument(
        "--annotations",
        type=Path,
        metavar="JSON",
        help="COCO-style instances JSON: store boxes, labels, iscrowd, area, image_id",
    )
    targets.add_argument(
        "--masks",
        type=Path,
        metavar="DIR",
        help="folder of PNG class masks, same relative paths as the images: store mask",
    )
    convert.add_argument(
        "--instance-masks",
        action="store_true",
        help="with --annotations: also each object's mask (needs pycocotools)",
    )
    convert.add_argument(
        "--shards",
        action="store_true",
        help="write tar shards (WebDataset layout) and an index into the folder DEST",
    )
    convert.add_argument(
        "--shard-size",
        type=arguments.byte_size,
        default=256 << 20,
        metavar="SIZE",
        help="with --shards: bytes per shard (default 256MB)",
    )
    convert.add_argument(
        "--ray",
        action="store_true",
        help="with --shards: spread the conversion over a Ray cluster (RAY_ADDRESS, or local)",
    )
    convert.add_argument(
        "--captions",
        action="store_true",
        help="with --shards: image-text pairs, SOURCE a folder of images with a .txt beside "
        "each, or a .csv/.jsonl of path and caption",
    )
    convert.add_argument(
        "--hf-split", metavar="NAME", help="with hf:PATH: the split of a DatasetDict"
    )
    convert.add_argument(
        "--hf-image", metavar="COLUMN", help="with hf:PATH: the Image column (default: image)"
    )
    convert.add_argument(
        "--hf-label",
        metavar="COLUMN",
        help="with hf:PATH: the label or COCO-style objects column, or none (default: label, "
        "labels or objects, the first there is)",
    )
    convert.set_defaults(run=commands.convert)


def _info(subcommands: Subcommands) -> None:
    info = subcommands.add_parser("info", help="print a database's or shard set's metadata")
    _add_source(info)
    info.set_defaults(run=commands.info)


def _index(subcommands: Subcommands) -> None:
    index = subcommands.add_parser(
        "index", help="write index.json beside WebDataset shards (*.tar), read once by all"
    )
    index.add_argument("folder", type=Path, help="a folder of WebDataset .tar shards")
    index.add_argument(
        "--upgrade",
        action="store_true",
        help="convert the folder's index of version 1 or 2 (members inline) to version 3 "
        "(a member table per shard, written first; index.json replaced last) (default: off)",
    )
    index.set_defaults(run=commands.index)


def _verify(subcommands: Subcommands) -> None:
    verify = subcommands.add_parser(
        "verify", help="read, check and decode every record (shard sets: hashes and samples)"
    )
    _add_source(verify)
    verify.set_defaults(run=commands.verify)


def _diagnose(subcommands: Subcommands) -> None:
    diagnose = subcommands.add_parser(
        "diagnose", help="is data loading the bottleneck? step vs loader vs real loop"
    )
    _add_batch_options(diagnose)
    diagnose.add_argument(
        "--seconds",
        type=arguments.positive_float,
        default=60,
        help="about how long the three measurements take together (default: %(default)s)",
    )
    diagnose.add_argument(
        "--batches",
        type=arguments.positive,
        default=100,
        help="timed batches of each measurement, at most (default: %(default)s)",
    )
    diagnose.add_argument(
        "--warmup",
        type=arguments.non_negative,
        default=3,
        help="untimed batches before each measurement (default: %(default)s)",
    )
    diagnose.add_argument(
        "--workers",
        type=arguments.num_workers,
        default="auto",
        help="loader workers: a number, auto or tune (default: %(default)s)",
    )
    diagnose.add_argument(
        "--model",
        type=arguments.model,
        default="resnet18",
        help="the torchvision model the step trains, or none to time the loading alone "
        "(default: %(default)s)",
    )
    diagnose.add_argument("--json", action="store_true", help="print the report as JSON")
    diagnose.add_argument(
        "--plot", type=arguments.plot, help="PNG of each iteration's wait and step"
    )
    diagnose.set_defaults(run=commands.diagnose)


def _bench(subcommands: Subcommands) -> None:
    bench = subcommands.add_parser("bench", help="throughput over worker counts and prefetch depth")
    _add_batch_options(bench)
    bench.add_argument(
        "--batches",
        type=arguments.positive,
        default=10,
        help="timed batches per setting (default: %(default)s)",
    )
    bench.add_argument(
        "--workers",
        type=arguments.int_list(0),
        default=None,
        help="comma-separated counts (default 0..CPUs)",
    )
    bench.add_argument(
        "--prefetch",
        type=arguments.int_list(1),
        default=[2, 4],
        help="comma-separated prefetch factors (default: 2,4)",
    )
    bench.add_argument("--plot", type=arguments.plot, help="PNG of throughput vs workers")
    bench.set_defaults(run=commands.bench)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a command. Whatever goes wrong ends in one line on stderr and exit status 2
    (with ``--verbose``, the traceback above it)."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        _refuse_unknown(parser, args.command, extras)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    warnings.showwarning = _one_line_warning(args.command)
    try:
        args.run(args)
    except KeyboardInterrupt:
        parser.exit(130, f"fastload {args.command}: interrupted{_after_interrupt(args)}\n")
    except Exception as error:  # one clear line, not a traceback
        if args.verbose:
            traceback.print_exc()
        parser.exit(2, f"fastload {args.command}: error: {_one_line(error)}\n")


def _after_interrupt(args: argparse.Namespace) -> str:
    """What an interrupted conversion left, and the command that goes on from it."""
    destination = getattr(args, "destination", None)
    if args.command != "convert" or not destination:
        return ""
    go_on = "the same command with --resume goes on from there"
    if "://" in destination:
        return f": {destination} keeps what was converted; {go_on}"
    if not Path(destination).exists():
        return f": nothing was converted into {destination}"
    return f": {destination} keeps what was converted; {go_on}"


def _refuse_unknown(parser: argparse.ArgumentParser, command: str, extras: list[str]) -> None:
    """Exit 2 naming, as the subcommand, the options it does not know (not the arguments
    around them the user typed right), each with the closest it knows."""
    subcommand = next(
        action.choices[command]
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    known = [name for action in subcommand._actions for name in action.option_strings]
    unknown = [extra for extra in extras if extra.startswith("-")] or extras
    named = []
    for option in unknown:
        close = difflib.get_close_matches(option.split("=", 1)[0], known, n=1)
        named.append(f"{option} (did you mean {close[0]}?)" if close else option)
    what = "option" if len(named) == 1 else "options"
    subcommand.error(f"unrecognized {what}: {', '.join(named)}")


def _one_line_warning(command: str) -> Callable[..., None]:
    """Warnings as ``fastload <command>: warning: ...`` on stderr, one line each."""

    def show(message: Warning | str, *_: object, **__: object) -> None:
        print(f"fastload {command}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    return show


def _raised_in_worker(message: str) -> str:
    """The worker's exception and its notes, from the traceback torch's DataLoader puts in
    the message of the exception it raises again in the training loop."""
    lines = message.strip().splitlines()
    frames = [index for index, line in enumerate(lines) if line.startswith("  File ")]
    if not frames:
        return message
    end = frames[-1] + 1
    while end < len(lines) and lines[end].startswith(" "):  # the frame's code and markers
        end += 1
    if end == len(lines):
        return message
    raised, *notes = lines[end:]
    return " ".join([raised.partition(": ")[2] or raised, *notes])


def _one_line(error: Exception) -> str:
    """The error's message on one line; its type too where that is not self-evident (a
    bug's AssertionError, KeyError, ...). An error a loader worker raised is its own last
    line, not the worker's traceback."""
    message = str(error)
    if "Original Traceback" in message:  # torch's ExceptionWrapper, re-raised in the loop
        message = _raised_in_worker(message)
    text = " ".join(" ".join([message, *getattr(error, "__notes__", [])]).split())
    if isinstance(error, (OSError, ValueError, ImportError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


if __name__ == "__main__":
    main()
