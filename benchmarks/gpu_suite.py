"""Every GPU claim in one command: the CUDA tests and the GPU benchmarks, each part in its own
process, JSON and PNG into benchmarks/results/gpu/.

Parts, in the order they run (each compares with its baseline in the same run):

  tests       the whole pytest suite with CUDA visible (cuda_tests.py)
  prefetch    ResNet-50 step fed by the usual loop, apex, timm, DataPrefetcher (prefetch.py)
  augment     fastload.gpu vs torchvision v2, Kornia, the per-sample CPU recipe (gpu_augment.py)
  detection   boxes, labels and instance masks: fastload.gpu vs torchvision v2 per sample
              (detection_augment.py)
  decode      GPUDecoder vs torchvision's nvJPEG call vs OpenCV on every core (gpu_decode.py)
  memory      reserved CUDA memory over 5 epochs (gpu_memory.py)
  end_to_end  ResNet-50 training from 10,000 photos: fastload's decodes, torchvision, DALI
  end_to_end_r18  the same with ResNet-18, the GPU-starved case (end_to_end.py)

A part that crashes or runs out of time is recorded as such in ``suite.json`` and the
next one starts. ``--smoke`` runs every part at tiny sizes, one after another in this
process (on a CPU in under a minute), into a scratch folder, so the suite cannot rot
between GPU runs. After a real run, ``python benchmarks/docs_page.py`` writes the tables
into the docs' benchmarks page (docs/benchmarks.md).

On the GPU machine (torch there; lmdb, albumentations and kornia as wheels in .whl):
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=$PWD/src:/tmp/site python3 benchmarks/gpu_suite.py --parts tests,prefetch,...

Usage:
    python benchmarks/gpu_suite.py [--parts all] [--budget-s 3600] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS
from fastload.system import available_cpus

HERE = Path(__file__).resolve().parent


def end_to_end_options(model: str) -> list[str]:
    """ResNet training from photos, each pipeline handing over bfloat16 (DALI: float16):
    fastload's three decodes from LMDB, the torchvision baseline, DALI at two
    hw_decoder_load settings; 5 interleaved rounds, within the part's budget."""
    workers = str(available_cpus())
    return ["--source", "photos", "--images", "10000", "--epochs", "2", "--rounds", "5",
            "--model", model, "--batch-size", "256", "--image-size", "224",
            "--workers", workers, "--baseline-workers", workers,
            "--decodes", "cpu,gpu,gpu-fused", "--storages", "lmdb", "--augment", "gpu",
            "--dtype", "bfloat16", "--dali", "0.65,1.0"]  # fmt: skip


#: Part name -> (script, its options on a GPU run, seconds it may take at most).
PARTS: dict[str, tuple[str, list[str], int]] = {
    "tests": ("cuda_tests.py", ["--workers", str(max(1, available_cpus() // 2))], 480),
    "prefetch": ("prefetch.py", [], 420),
    "augment": ("gpu_augment.py", [], 420),
    "detection": ("detection_augment.py", ["--batch-size", "64"], 240),
    "decode": ("gpu_decode.py", [], 240),
    "memory": ("gpu_memory.py", [], 240),
    "end_to_end": ("end_to_end.py", [*end_to_end_options("resnet50"), "--name", "end_to_end"], 570),
    "end_to_end_r18": (
        "end_to_end.py",
        [*end_to_end_options("resnet18"), "--name", "end_to_end_resnet18"],
        570,
    ),
}

#: Parts whose smoke run would repeat another part's exactly.
SMOKE_SAME_AS = {"end_to_end_r18": "end_to_end"}

#: Parts with a --budget-s of their own, which keep what they measured when it runs out.
KEEPS_PARTIAL_RESULTS = {"end_to_end", "end_to_end_r18"}


def prepare_environment() -> None:
    """What every part inherits: no albumentations update check (no network on a GPU
    machine, and its DNS lookup can stall), and as many open files as allowed (each
    tensor a worker sends is a file descriptor: 256 encoded images a batch from 16
    workers pass the usual soft limit of 1024)."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, 1 << 16) if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def run_part(name: str, out: Path, smoke: bool, timeout: float) -> dict[str, object]:
    """Run one part in its own process group (its DataLoader workers die with it)."""
    script, options, _ = PARTS[name]
    if name in KEEPS_PARTIAL_RESULTS and not smoke:  # stop itself in time to write them
        options = [*options, "--budget-s", f"{max(timeout - 40, 10):.0f}"]
    command = [sys.executable, str(HERE / script), "--out", str(out), "--plot",
               *(["--smoke"] if smoke else options)]  # fmt: skip
    print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=HERE, start_new_session=True)

    def stop(signum, frame):  # the suite itself is being stopped: take the part with it
        os.killpg(process.pid, signal.SIGKILL)
        raise SystemExit(f"gpu_suite: stopped by signal {signum} during {name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        returncode: int | None = process.wait(timeout=timeout)
        status = "ok" if returncode == 0 else f"failed (exit status {returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        returncode, status = None, f"timed out after {timeout:.0f} s"
    finally:
        signal.signal(signal.SIGTERM, previous)
    seconds = time.perf_counter() - start
    result = out / f"{Path(script).stem}.json"
    fresh = result.exists() and result.stat().st_mtime >= time.time() - seconds - 1
    print(f"=== {name}: {status} in {seconds:.0f} s", flush=True)
    return {"part": name, "benchmark": result.stem, "status": status, "returncode": returncode,
            "seconds": round(seconds, 1), "result": result.name if fresh else None}  # fmt: skip


def run_part_here(name: str, out: Path) -> dict[str, object]:
    """A smoke run of one part in this process (each process would spend seconds importing
    torch again); a crash is recorded as a process's would be."""
    script = PARTS[name][0]
    argv, sys.argv = sys.argv, [str(HERE / script), "--out", str(out), "--plot", "--smoke"]
    print(f"\n=== {name}: {' '.join(sys.argv)} (in this process)", flush=True)
    start = time.perf_counter()
    try:
        runpy.run_path(str(HERE / script), run_name="__main__")
        status = "ok"
    except SystemExit as stop:
        status = "ok" if stop.code in (0, None) else f"failed (exit status {stop.code})"
    except Exception as error:  # the next part still runs, as after a crashed process
        status = f"failed ({type(error).__name__}: {error})"
    finally:
        sys.argv = argv
    seconds = time.perf_counter() - start
    result = out / f"{Path(script).stem}.json"
    print(f"=== {name}: {status} in {seconds:.0f} s", flush=True)
    return {"part": name, "benchmark": result.stem, "status": status, "returncode": None,
            "seconds": round(seconds, 1),
            "result": result.name if result.exists() else None}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="all", help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument(
        "--budget-s", type=float, default=540,
        help="no part runs past this many seconds from the start (a device call allows 600)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="default: results/gpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, scratch folder")
    args = parser.parse_args()
    names = list(PARTS) if args.parts == "all" else args.parts.split(",")
    if args.smoke:  # the same script as end_to_end at smoke sizes: once is enough
        names = [name for name in names if name not in SMOKE_SAME_AS]
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        print(f"gpu_suite: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="gpu-suite-")) if args.smoke else RESULTS / "gpu"
    )
    out.mkdir(parents=True, exist_ok=True)

    prepare_environment()
    deadline = time.perf_counter() + args.budget_s
    parts = []
    for name in names:
        left = deadline - time.perf_counter()
        if left < 30:
            parts.append({"part": name, "benchmark": Path(PARTS[name][0]).stem,
                          "status": "not started: out of budget", "result": None})  # fmt: skip
            continue
        if args.smoke:
            parts.append(run_part_here(name, out))
        else:
            parts.append(run_part(name, out, args.smoke, min(PARTS[name][2], left)))
    summary = out / ("suite.json" if not args.smoke else "suite-smoke.json")
    previous = json.loads(summary.read_text())["parts"] if summary.exists() else []
    merged = {part["part"]: part for part in [*previous, *parts]}  # a later run of a part wins
    summary.write_text(json.dumps({"smoke": args.smoke, "parts": list(merged.values())},
                                  indent=2) + "\n")  # fmt: skip
    print(f"\n=== summary ({out})")
    for part in parts:
        print(f"{part['part']:<11} {part['status']}")
        if part.get("result"):
            print(json.loads((out / part["result"]).read_text())["table"])
    failed = [part for part in parts if part["status"] != "ok"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
