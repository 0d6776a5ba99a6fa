"""The test suite with CUDA visible: pass, fail and skip counts, and every failure by name.

Runs pytest in a subprocess and writes ``<name>.json`` and a bar chart. Each outcome is
logged as it happens (``lib/outcome_log.py``), so a run stopped by ``--budget-s`` keeps what
it finished and says it was cut short. ``--select``:

- ``all``: the whole suite, slow tests included;
- ``new``: the CUDA tests (``needs_cuda``) of the paths that had never run on a GPU,
  ``NEW_ON_CUDA``, first in ``make gpu-check``;
- ``rest``: the CUDA tests of every other file.

``--smoke`` runs ``new`` in place of ``all`` (without a GPU every selected test is
skipped, which still checks the report).

Usage:
    python benchmarks/cuda_tests.py [--select all|new|rest] [--name cuda_tests]
        [--workers N] [--budget-s S] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Budget, machine, pyplot, save_figure, sentence, suite_arguments
from benchmarks.lib.outcome_log import ENVIRONMENT
from fastload.tools.measure import format_table

ROOT = Path(__file__).resolve().parents[1]
# The suite runs this script; its own smoke test would run the suite again.
DESELECT = ["tests/benchmarks/test_gpu_suite.py", "tests/benchmarks/test_gpu_check.py"]

#: The test files of the paths that had never run on CUDA: GPUDecoder's ``cpu_share`` and
#: its one copy of the CPU's images from pinned memory, with the decoder's other tests,
#: and the fused kernel reading each image through its table of addresses and strides.
#: (The prefetcher's super-batches, the decode producer, masks and boxes, the policies and
#: resume ran on an H200 on 2026-11-27 and 28 and are in ``rest``.)
NEW_ON_CUDA = [
    "tests/decode/test_staging.py",
    "tests/decode/test_gpu.py",
    "tests/decode/test_nvimgcodec.py",
    "tests/decode/test_resample.py",
]


def selection(select: str) -> list[str]:
    """pytest's arguments for ``select`` (see the module's description)."""
    if select == "new":
        return ["-m", "needs_cuda", *NEW_ON_CUDA]
    if select == "rest":
        return ["-m", "needs_cuda", "tests", *(f"--ignore={path}" for path in NEW_ON_CUDA)]
    return ["-m", "slow or not slow", "tests"]


def outcomes(log: Path) -> tuple[dict[str, int], list[dict[str, str]]]:
    """Counts of passed/failed/errors/skipped and each failure's name and first line, from
    ``outcome_log``'s lines."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    lines = log.read_text().splitlines() if log.exists() else []
    for line in lines:
        entry = json.loads(line)
        counts[entry["outcome"]] += 1
        if entry["outcome"] in ("failed", "errors"):
            failures.append(entry)
    return counts, failures


def plot_counts(result: Path) -> Path:
    plt = pyplot()
    data = json.loads(result.read_text())
    counts = data["counts"]
    colours = {"passed": "#2a9d55", "failed": "#c0392b", "errors": "#e67e22", "skipped": "#999999"}
    fig, ax = plt.subplots(figsize=(7, 3))
    bars = ax.barh(list(counts), list(counts.values()), color=[colours[k] for k in counts])
    ax.bar_label(bars, padding=3)
    ax.invert_yaxis()
    ax.set_xlabel("tests")
    ax.set_title(f"cuda_tests: {data['machine']['device']}")
    return save_figure(fig, result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--select", choices=["all", "new", "rest"], default="all")
    parser.add_argument("--name", default="cuda_tests", help="the result files' name")
    parser.add_argument(
        "--workers", type=int, default=0, help="pytest-xdist processes (0: one process)"
    )
    suite_arguments(parser)
    args = parser.parse_args()
    budget = Budget(args.budget_s)

    # smoke: a selection of CUDA tests (all skipped without a GPU) still checks the report
    arguments = selection("new" if args.smoke and args.select == "all" else args.select)
    if args.workers:  # the suite takes 3.5 minutes in one process on a 16-core GPU machine
        arguments += ["-n", str(args.workers)]
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "outcomes.jsonl"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", "benchmarks.lib.outcome_log", "--continue-on-collection-errors",
                   *(f"--deselect={path}" for path in DESELECT), *arguments]  # fmt: skip
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        environment = {**os.environ, ENVIRONMENT: str(log), "PYTHONPATH": path}
        limit = budget.left() - 5  # the rest: this report
        start = time.perf_counter()
        try:
            completed = subprocess.run(
                command, cwd=ROOT, env=environment, timeout=limit if math.isfinite(limit) else None
            )
            returncode: int | str = completed.returncode
        except subprocess.TimeoutExpired:
            returncode = "stopped"
            budget.allows(math.inf, "the end of the tests")
        seconds = time.perf_counter() - start
        counts, failures = outcomes(log)
    table = format_table(
        ["passed", "failed", "errors", "skipped", "seconds"],
        [[*counts.values(), f"{seconds:.0f}"]],
    )
    if failures:
        table += "\n\n" + format_table(
            ["failed test", "message"], [[f["test"], f["message"]] for f in failures]
        )
    if budget.cut_short:
        table += "\n\n" + sentence(budget.cut_short, "these are the tests it finished")
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    result = args.out / f"{args.name}.json"
    payload = {
        "benchmark": "cuda_tests",
        "machine": machine(),
        "settings": {
            "command": " ".join(command[1:]),
            "select": args.select,
            "smoke": args.smoke,
            "budget_s": args.budget_s,
        },
        "returncode": returncode,
        "seconds": seconds,
        "counts": counts,
        "failures": failures,
        "cut_short": budget.cut_short,
        "table": table,
    }
    result.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {result}")
    if args.plot:
        plot_counts(result)
    # pytest's 5: nothing selected (the "rest" of a suite whose CUDA tests are all "new")
    if returncode not in (0, 5, "stopped"):  # the suite reports this part as failed
        sys.exit(1)


if __name__ == "__main__":
    main()
