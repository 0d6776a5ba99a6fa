"""PNG plots for ``fastload diagnose`` and ``fastload bench`` (matplotlib, loaded lazily)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from fastload.tools.diagnostics.waits import WaitSummary

__all__ = ["plot_timeline", "plot_workers"]


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
    fig.savefig(path, dpi=120)
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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
