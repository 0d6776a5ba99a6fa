"""PNG plots for ``fastload diagnose`` and ``fastload bench`` (matplotlib, loaded lazily).

A plot carries a mark in its metadata (PNG, PDF, SVG, PostScript; see
:mod:`fastload.tools.plot_mark`): a later plot replaces a file that has it, and no other
file (a photo, someone's chart), so that a run repeated with the same ``--plot`` works
and a mistyped one destroys nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from fastload._atomic import replacing
from fastload.tools.diagnostics.waits import WaitSummary
from fastload.tools.plot_mark import MARK_KEYS, PLOT_MARK, is_marked

__all__ = ["PLOT_MARK", "check_replaceable", "plot_timeline", "plot_workers"]


def check_replaceable(path: Path) -> None:
    """Refuse ``path`` as a plot to write if a file is there that fastload did not write
    (one without the mark, read as :func:`~fastload.tools.plot_mark.is_marked` reads it).

    Raises:
        FileExistsError: Naming ``path``.
    """
    if not path.exists() or is_marked(path):
        return
    raise FileExistsError(
        f"{path} exists and is not a plot fastload wrote: it is left as it is; give the "
        "plot a new name"
    )


def _save(fig: Any, path: Path) -> None:
    """``fig`` to ``path``, marked, whole or not at all
    (:func:`~fastload._atomic.replacing`: a new file's permissions, as any other the
    user makes)."""
    check_replaceable(path)  # again: a file may have come since the arguments were read
    fmt = path.suffix.lower().lstrip(".")
    key = MARK_KEYS.get(fmt)
    with replacing(path) as file:
        fig.savefig(file, dpi=120, format=fmt, metadata={key: PLOT_MARK} if key else None)


def _pyplot() -> ModuleType:
    """``matplotlib.pyplot``, drawing off screen."""
    try:
        import matplotlib
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("plots need matplotlib: pip install matplotlib") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(summary: WaitSummary, path: str | Path, *, title: str = "") -> Path:
    """Each iteration as a bar: waiting for data (red) under computing (blue)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    steps = range(summary.iterations)
    waits = [1000 * w for w in summary.waits]
    computes = [1000 * c for c in summary.computes] + [0.0] * (
        summary.iterations - len(summary.computes)
    )
    ax.bar(steps, waits, color="#d9534f", label="waiting for data")
    ax.bar(steps, computes, bottom=waits, color="#2a7ab0", label="step")
    ax.set_xlabel("iteration")
    ax.set_ylabel("ms")
    ax.set_title(title or f"data wait: {100 * summary.wait_fraction:.1f}% of the loop")
    ax.legend()
    fig.tight_layout()
    try:
        _save(fig, Path(path))
    finally:
        plt.close(fig)
    return Path(path)


def plot_workers(
    curve: dict[tuple[int, int], float], path: str | Path, *, unit: str = "batches/s"
) -> Path:
    """Throughput against the number of workers, one line per prefetch factor."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for prefetch in sorted({p for _, p in curve}):
        points = sorted((w, rate) for (w, p), rate in curve.items() if p == prefetch or w == 0)
        ax.plot(
            [w for w, _ in points],
            [r for _, r in points],
            marker="o",
            label=f"prefetch_factor={prefetch}",
        )
    best = max(curve, key=lambda setting: curve[setting])
    ax.annotate(
        "best", (best[0], curve[best]), textcoords="offset points", xytext=(0, 8), ha="center"
    )
    ax.set_xticks(sorted({w for w, _ in curve}))
    ax.set_xlabel("num_workers")
    ax.set_ylabel(unit)
    ax.set_title("throughput vs workers")
    ax.legend()
    fig.tight_layout()
    try:
        _save(fig, Path(path))
    finally:
        plt.close(fig)
    return Path(path)
