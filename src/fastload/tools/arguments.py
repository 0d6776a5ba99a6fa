"""The value types of the ``fastload`` command line's options: each parses one text,
or raises ``argparse.ArgumentTypeError`` with what it wants (argparse makes it the one
line of a usage error, exit status 2)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "byte_size",
    "check_plot_outside",
    "int_list",
    "integer",
    "model",
    "non_negative",
    "num_workers",
    "plot",
    "positive",
    "quality",
    "source",
]


def byte_size(value: str) -> int:
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


def source(text: str) -> str | Path:
    """A command's DATABASE: a URL of object storage as it is (a Path would mangle it), else
    a path."""
    from fastload.shards.stores.connect import is_remote

    return text if is_remote(text) else Path(text)


def integer(value: str, *, low: int, rule: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{rule}, got {value!r}") from None
    if number < low:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return number


def num_workers(value: str) -> int | str:
    if value in ("auto", "tune"):
        return value
    return integer(value, low=0, rule="must be >= 0, auto or tune")


def positive(value: str) -> int:
    return integer(value, low=1, rule="must be a positive integer")


def positive_float(value: str) -> float:
    """A positive, finite number of seconds (NaN and inf refused)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def non_negative(value: str) -> int:
    return integer(value, low=0, rule="must be >= 0")


def quality(value: str) -> int:
    quality = integer(value, low=1, rule="must be a JPEG quality in 1..100")
    if quality > 100:
        raise argparse.ArgumentTypeError(f"must be a JPEG quality in 1..100, got {value}")
    return quality


def model(value: str) -> str:
    if value == "none":  # the loading alone: torchvision's models are not imported
        return value
    import torchvision

    if value not in torchvision.models.list_models(torchvision.models):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a torchvision classification model (e.g. resnet18, resnet50), "
            "or 'none'"
        )
    return value


def int_list(low: int) -> Callable[[str], list[int]]:
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


def plot(value: str) -> Path:
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
    from fastload.tools.plots import check_replaceable

    try:
        check_replaceable(path)
    except FileExistsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def check_plot_outside(plot: Path | None, data: Path) -> None:
    """Refuse a plot to be written inside the data it measures (over one of its images,
    or as a new file a loader of that folder would read).

    Raises:
        ValueError: Naming both.
    """
    if plot is None:
        return
    where, measured = plot.resolve(), data.resolve()
    if where == measured or measured in where.parents:
        raise ValueError(
            f"--plot {plot} is inside the data it measures ({data}); write it elsewhere"
        )
