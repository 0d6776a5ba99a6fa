"""Running the GPU benchmarks as parts: each script in its own process group (its DataLoader
workers die with it), within its budget, its outcome recorded whatever happens.

A part is given ``--budget-s`` a little under its time, so it stops itself and writes what
it measured (saying it was cut short); only if it overruns that too is it killed. Used by
``gpu_suite.py`` (every GPU claim) and ``gpu_check.py`` (what a short GPU window measures
first).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]  # the scripts: benchmarks/<Part.script>

#: Seconds a part keeps, inside its time, to write its JSON and PNG after its own budget.
MARGIN_S = 15


@dataclass(frozen=True)
class Part:
    """One script run with ``options`` on a GPU, or ``--smoke`` plus ``smoke_options``.

    ``budget_s``: the most it may take (None: whatever the plan has left when it starts);
    ``result``: the JSON it writes, named without ``.json`` (default: the script's name).
    """

    name: str
    script: str
    options: list[str] = field(default_factory=list)
    budget_s: float | None = None
    smoke_options: list[str] = field(default_factory=list)
    result: str | None = None

    @property
    def result_name(self) -> str:
        return self.result or Path(self.script).stem


def prepare_environment() -> None:
    """What every part inherits: no albumentations update check (no network on a GPU
    machine, and its DNS lookup can stall), and as many open files as allowed (each
    tensor a worker sends is a file descriptor: 256 encoded images a batch from 16
    workers pass the usual soft limit of 1024)."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, 1 << 16) if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def not_started(part: Part, why: str) -> dict[str, object]:
    return {"part": part.name, "benchmark": part.result_name, "status": f"not started: {why}",
            "returncode": None, "seconds": 0.0, "budget_s": part.budget_s,
            "result": None}  # fmt: skip


def run_part(part: Part, out: Path, *, smoke: bool, timeout: float) -> dict[str, object]:
    """Run ``part`` for at most ``timeout`` seconds; its status, time and result file."""
    options = [*(["--smoke", *part.smoke_options] if smoke else part.options),
               "--budget-s", f"{max(timeout - MARGIN_S, 1):.0f}"]  # fmt: skip
    command = [sys.executable, str(BENCHMARKS / part.script), "--out", str(out), "--plot", *options]
    print(f"\n=== {part.name}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=BENCHMARKS, start_new_session=True)

    def stop(signum, frame):  # the whole run is being stopped: take the part with it
        os.killpg(process.pid, signal.SIGKILL)
        raise SystemExit(f"stopped by signal {signum} during {part.name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        returncode: int | None = process.wait(timeout=timeout)
        status = "ok" if returncode == 0 else f"failed (exit status {returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        returncode, status = None, f"killed after {timeout:.0f} s: over its budget"
    finally:
        signal.signal(signal.SIGTERM, previous)
    seconds = time.perf_counter() - start
    result = out / f"{part.result_name}.json"
    fresh = result.exists() and result.stat().st_mtime >= time.time() - seconds - 1
    if fresh and returncode == 0:
        cut_short = json.loads(result.read_text()).get("cut_short")
        status = cut_short or status
    print(f"=== {part.name}: {status} in {seconds:.0f} s", flush=True)
    return {"part": part.name, "benchmark": part.result_name, "status": status,
            "returncode": returncode, "seconds": round(seconds, 1), "budget_s": part.budget_s,
            "result": result.name if fresh else None}  # fmt: skip


def finished(record: dict[str, object]) -> bool:
    """Whether a part ran to its end or stopped itself in time with what it measured."""
    status = str(record["status"])
    return status == "ok" or status.startswith("cut short")


def unknown_parts(names: list[str], known: list[str], program: str) -> None:
    """Exit 2 with one line if a name is not a part."""
    unknown = [name for name in names if name not in known]
    if unknown:
        print(f"{program}: unknown part(s) {', '.join(unknown)}; choose from {', '.join(known)}",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
