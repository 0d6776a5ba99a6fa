"""The test suite with CUDA visible: pass, fail and skip counts, and every failure by name.

Runs pytest in a subprocess (JUnit XML report) and writes ``cuda_tests.json`` and a bar
chart. ``--smoke`` runs only one file's tests marked ``needs_cuda`` (all skipped without a
GPU, which still checks the report).

Usage:
    python benchmarks/cuda_tests.py [--timeout 420] [--workers N] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from common import machine, pyplot, save_figure, suite_arguments
from fastload.tools.measure import format_table

ROOT = Path(__file__).resolve().parent.parent
# The suite runs this script; its own smoke test would run the suite again.
DESELECT = "tests/benchmarks/test_gpu_suite.py"


def outcomes(junit: Path) -> tuple[dict[str, int], list[dict[str, str]]]:
    """Counts of passed/failed/errors/skipped and each failure's name and first line."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for outcome, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            found = case.find(outcome)
            if found is not None:
                counts[key] += 1
                if key != "skipped":
                    message = (found.get("message") or found.text or "").strip().splitlines()
                    failures.append({"test": name, "outcome": key,
                                     "message": message[0][:300] if message else ""})  # fmt: skip
                break
        else:
            counts["passed"] += 1
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
    parser.add_argument("--timeout", type=float, default=420, help="seconds for pytest")
    parser.add_argument(
        "--workers", type=int, default=0, help="pytest-xdist processes (0: one process)"
    )
    suite_arguments(parser)
    args = parser.parse_args()

    # smoke: one file's CUDA tests (all skipped without a GPU) still check the report
    everything = ["-m", "slow or not slow"]  # the slow tests too, which plain pytest leaves out
    selection = ["-m", "needs_cuda", "tests/gpu/test_resample.py"] if args.smoke else everything
    if args.workers:  # the suite takes 3.5 minutes in one process on a 16-core GPU machine
        selection += ["-n", str(args.workers)]
    with tempfile.TemporaryDirectory() as work:
        junit = Path(work) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={junit}", "--deselect", DESELECT, *selection]  # fmt: skip
        start = time.perf_counter()
        try:
            completed = subprocess.run(command, cwd=ROOT, timeout=args.timeout)
            returncode: int | str = completed.returncode
        except subprocess.TimeoutExpired:
            returncode = f"timed out after {args.timeout:.0f} s"
        seconds = time.perf_counter() - start
        if junit.exists():
            counts, failures = outcomes(junit)
        else:
            counts, failures = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}, []
    table = format_table(
        ["passed", "failed", "errors", "skipped", "seconds"],
        [[*counts.values(), f"{seconds:.0f}"]],
    )
    if failures:
        table += "\n\n" + format_table(
            ["failed test", "message"], [[f["test"], f["message"]] for f in failures]
        )
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    result = args.out / "cuda_tests.json"
    payload = {
        "benchmark": "cuda_tests",
        "machine": machine(),
        "settings": {"command": " ".join(command[1:]), "smoke": args.smoke},
        "returncode": returncode,
        "seconds": seconds,
        "counts": counts,
        "failures": failures,
        "table": table,
    }
    result.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {result}")
    if args.plot:
        plot_counts(result)
    if returncode != 0:  # the suite reports this part as failed; the JSON says which tests
        sys.exit(1)


if __name__ == "__main__":
    main()
