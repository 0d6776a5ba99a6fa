"""Shared plumbing of the benchmark scripts: one result type, interleaved rounds, JSON out,
a table, a plot."""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from fastload.loader.defaults import shared_memory_free
from fastload.system import available_cpus
from fastload.tools.diagnostics.procstats import cpu_by_thread_name
from fastload.tools.measure import Measurement, format_table

#: benchmarks/results: one folder per kind of machine, cpu/ (no GPU) and gpu/
RESULTS = Path(__file__).resolve().parents[1] / "results"
T = TypeVar("T")


def results_folder() -> Path:
    """Where a result measured here goes by default: ``results/gpu/`` on a machine with
    CUDA, ``results/cpu/`` on one without."""
    return RESULTS / ("gpu" if torch.cuda.is_available() else "cpu")


@dataclass
class Row:
    """One variant of a benchmark: its timings and the work each timed repeat did.

    A variant that could not run (a peer that does not install, an error on this
    machine) has no measurement and says why in ``note``.
    """

    name: str
    measurement: Measurement | None
    items: int  # images or batches per timed repeat, for the throughput column
    extra: dict[str, object] = field(default_factory=dict)
    versus: str | None = None  # the row this one is compared with; default: the report's baseline
    note: str | None = None

    @property
    def per_second(self) -> float | None:
        return None if self.measurement is None else self.items / self.measurement.median


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "no GPU (CPU only)"


def nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def machine() -> dict[str, object]:
    import cv2
    import numpy
    import torchvision

    cuda = torch.cuda.is_available()
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": available_cpus(),
        "device": device_name(),
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        if cuda
        else None,
        "driver": nvidia_driver() if cuda else None,
        "shm_free_mib": None if (shm := shared_memory_free()) is None else shm >> 20,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "opencv": cv2.__version__,
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def suite_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every part of the GPU suite takes."""
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: does it run?")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per variant")
    parser.add_argument("--out", type=Path, default=results_folder(), help="folder for JSON, PNG")
    parser.add_argument("--plot", action="store_true")
    budget_argument(parser)


def budget_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget-s", type=float, default=math.inf,
        help="start no round that would end past this many seconds; keep what was measured",
    )  # fmt: skip


class Budget:
    """The seconds a benchmark may take (``--budget-s``, counted from here): a round that
    would not end in time is not started, what was measured is kept, and ``cut_short``
    says where it stopped, for the JSON.

    Example:
        >>> budget = Budget(0.0)
        >>> budget.allows(1.0, "round 2 of 3"), budget.cut_short
        (False, 'cut short by its 0 s budget before round 2 of 3')
    """

    def __init__(self, seconds: float = math.inf) -> None:
        self.seconds = seconds
        self.deadline = time.perf_counter() + seconds
        self.cut_short: str | None = None

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def allows(self, seconds: float, before: str) -> bool:
        """Whether ``seconds`` more end in time; the first refusal records ``before``."""
        if self.left() >= seconds:
            return True
        if self.cut_short is None:
            self.cut_short = f"cut short by its {self.seconds:.0f} s budget before {before}"
        return False


def describe(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def sentence(cut_short: str, kept: str) -> str:
    """``Budget.cut_short`` as the line under a table: what stopped it, and what was kept."""
    return f"{cut_short[0].upper()}{cut_short[1:]}: {kept}."


def interleaved(
    variants: Mapping[str, Callable[[], T]],
    *,
    rounds: int,
    warmup: int = 1,
    budget: Budget | None = None,
) -> dict[str, list[T] | str]:
    """Run every variant ``warmup`` times untimed, then ``rounds`` rounds in turn (A B C A B
    C ...), so that a noisy minute hurts every variant alike.

    Returns each variant's results, or for one that raised, the error as one line (its
    traceback goes to stderr); the others go on. With a ``budget``, no run starts that
    would end past it (judged by the longest run so far): the rounds done are kept, and a
    variant with none says so.
    """
    results: dict[str, list[T]] = {name: [] for name in variants}
    failed: dict[str, str] = {}
    longest = 0.0
    for index in range(warmup + rounds):
        for name, run in variants.items():
            if name in failed:
                continue
            stage = "the warm-up" if index < warmup else f"round {index - warmup + 1} of {rounds}"
            if budget is not None and not budget.allows(1.2 * longest, stage):
                break
            started = time.perf_counter()
            try:
                value = run()
            except Exception as error:  # one variant's failure must not cost the others
                traceback.print_exc()
                failed[name] = describe(error)
                continue
            longest = max(longest, time.perf_counter() - started)
            if index >= warmup:
                results[name].append(value)
    cut = "not run: " + (budget.cut_short if budget and budget.cut_short else "no round")
    return {name: failed.get(name, results[name] or cut) for name in variants}


def report(
    benchmark: str,
    rows: list[Row],
    *,
    baseline: str,
    unit: str,
    settings: dict[str, object],
    out: Path | None = None,
    summary: dict[str, object] | None = None,
    cut_short: str | None = None,
) -> Path:
    """Print the table (ratios against ``baseline``) and write ``<out>/<benchmark>.json``
    (``out``: :func:`results_folder` by default); ``cut_short`` (a :class:`Budget`'s) is
    said under the table and kept in the JSON."""
    out = results_folder() if out is None else out
    by_name = {row.name: row for row in rows}

    def speedup(row: Row) -> float | None:
        """Throughput over the reference's (its time ratio when both did the same work)."""
        reference = by_name[row.versus or baseline].per_second
        if row.per_second is None or reference is None:
            return None
        return row.per_second / reference

    def ratio(row: Row) -> str:
        if row.measurement is None:
            return row.note or "no measurement"
        if row.name == (row.versus or baseline):
            return "1.00x"
        value = speedup(row)
        return "-" if value is None else f"{value:.2f}x vs {row.versus or baseline}"

    extra_columns = list(dict.fromkeys(key for row in rows for key in row.extra))
    table = format_table(
        ["variant", "median s", f"{unit}/s", "speed-up", *extra_columns],
        [
            [
                row.name,
                "-" if row.measurement is None else f"{row.measurement.median:.4f}",
                "-" if row.per_second is None else f"{row.per_second:,.0f}",
                ratio(row),
                *(row.extra.get(key, "") for key in extra_columns),
            ]
            for row in rows
        ],
    )
    if cut_short:
        table += "\n\n" + sentence(cut_short, "the rounds measured before it are kept")
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{benchmark}.json"
    payload = {
        "benchmark": benchmark,
        "machine": machine(),
        "settings": {key: str(value) if isinstance(value, Path) else value
                     for key, value in settings.items()},
        "baseline": baseline,
        "unit": unit,
        "rows": [
            {
                "name": row.name,
                "seconds": None if row.measurement is None else list(row.measurement.seconds),
                "median_s": None if row.measurement is None else row.measurement.median,
                "items": row.items,
                "per_second": row.per_second,
                "versus": row.versus or baseline,
                "speedup": speedup(row),
                "note": row.note,
                **row.extra,
            }
            for row in rows
        ],
        "summary": summary or {},
        "cut_short": cut_short,
        "table": table,
    }  # fmt: skip
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def plot(result: Path) -> Path:
    """Bar chart of the speed-ups in a result JSON, saved beside it as PNG; grey bars are
    the baselines the others are compared with."""
    plt = pyplot()
    data = json.loads(result.read_text())
    measured = [row for row in data["rows"] if row["speedup"] is not None]
    if not measured:
        print(f"nothing measured in {result}: no plot")
        return result.with_suffix(".png")
    names = [row["name"] for row in measured]
    speedups = [row["speedup"] for row in measured]
    baselines = {row.get("versus", data["baseline"]) for row in measured}
    colours = ["#999999" if name in baselines else "#2a7ab0" for name in names]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.4))
    bars = ax.barh(names, speedups, color=colours)
    ax.bar_label(bars, labels=[f"{s:.1f}x" for s in speedups], padding=3)
    ax.invert_yaxis()
    versus = "the grey bar" if len(baselines) == 1 else "the grey bar of its group"
    repeats = len(measured[0]["seconds"])
    ax.set_xlabel(f"speed-up over {versus} (median of {repeats} runs)")
    machine = data["machine"]
    ax.set_title(f"{data['benchmark']}: {machine['device']}, {machine['cpus']} CPUs")
    ax.set_xlim(0, max(speedups) * 1.2)
    return save_figure(fig, result)


def pyplot():
    """matplotlib's pyplot on the Agg backend: the scripts run without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, result: Path) -> Path:
    """Save ``fig`` as a PNG beside the result JSON ``result``, and close it."""
    fig.tight_layout()
    png = result.with_suffix(".png")
    fig.savefig(png, dpi=120)
    pyplot().close(fig)
    print(f"wrote {png}")
    return png


def thread_cpu() -> Counter[str]:
    """CPU seconds of each live thread of this process so far, by name (Linux): Python's
    threads by theirs, the others (OpenMP's, CUDA's, nvJPEG's) by the system's, marked
    "(native)"."""
    names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
    return Counter(cpu_by_thread_name(names))
