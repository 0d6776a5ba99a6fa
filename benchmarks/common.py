"""Shared plumbing of the benchmark scripts: one result type, JSON out, a table, a plot."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fastload.timing import Measurement, format_table

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    """One variant of a benchmark: its timings and the work each timed repeat did."""

    name: str
    measurement: Measurement
    items: int  # images or batches per timed repeat, for the throughput column
    extra: dict[str, object] = field(default_factory=dict)
    versus: str | None = None  # the row this one is compared with; default: the report's baseline

    @property
    def per_second(self) -> float:
        return self.items / self.measurement.median


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "no GPU (CPU only)"


def machine() -> dict[str, object]:
    import cv2
    import numpy
    import torchvision

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": cpus,
        "device": device_name(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "opencv": cv2.__version__,
    }


def report(
    benchmark: str, rows: list[Row], *, baseline: str, unit: str, settings: dict[str, object]
) -> Path:
    """Print the table (ratios against ``baseline``) and write ``results/<benchmark>.json``."""
    by_name = {row.name: row for row in rows}

    def speedup(row: Row) -> float:
        return by_name[row.versus or baseline].measurement.median / row.measurement.median

    extra_columns = list(dict.fromkeys(key for row in rows for key in row.extra))
    table = format_table(
        ["variant", "median s", f"{unit}/s", "speed-up", *extra_columns],
        [
            [
                row.name,
                f"{row.measurement.median:.4f}",
                f"{row.per_second:,.0f}",
                f"{speedup(row):.2f}x vs {row.versus or baseline}"
                if row.name != (row.versus or baseline)
                else "1.00x",
                *(row.extra.get(key, "") for key in extra_columns),
            ]
            for row in rows
        ],
    )
    print(table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{benchmark}.json"
    payload = {
        "benchmark": benchmark,
        "machine": machine(),
        "settings": settings,
        "baseline": baseline,
        "unit": unit,
        "rows": [
            {
                "name": row.name,
                "seconds": list(row.measurement.seconds),
                "median_s": row.measurement.median,
                "items": row.items,
                "per_second": row.per_second,
                "versus": row.versus or baseline,
                "speedup": speedup(row),
                **row.extra,
            }
            for row in rows
        ],
        "table": table,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def plot(result: Path) -> Path:
    """Bar chart of the speed-ups in a result JSON, saved beside it as PNG; grey bars are
    the baselines the others are compared with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(result.read_text())
    names = [row["name"] for row in data["rows"]]
    speedups = [row["speedup"] for row in data["rows"]]
    baselines = {row.get("versus", data["baseline"]) for row in data["rows"]}
    colours = ["#999999" if name in baselines else "#2a7ab0" for name in names]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.4))
    bars = ax.barh(names, speedups, color=colours)
    ax.bar_label(bars, labels=[f"{s:.1f}x" for s in speedups], padding=3)
    ax.invert_yaxis()
    versus = "the grey bar" if len(baselines) == 1 else "the grey bar of its group"
    repeats = len(data["rows"][0]["seconds"])
    ax.set_xlabel(f"speed-up over {versus} (median of {repeats} runs)")
    machine = data["machine"]
    ax.set_title(f"{data['benchmark']}: {machine['device']}, {machine['cpus']} CPUs")
    ax.set_xlim(0, max(speedups) * 1.2)
    fig.tight_layout()
    png = result.with_suffix(".png")
    fig.savefig(png, dpi=120)
    print(f"wrote {png.relative_to(RESULTS.parent.parent)}")
    return png
