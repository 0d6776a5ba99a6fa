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

Each part runs in its own process within its time (``lib/parts.py``); one that crashes or
runs out of time is recorded as such in ``suite.json`` and the next one starts. For a
short GPU window, ``gpu_check.py`` (``make gpu-check``) runs what matters first.
``--smoke`` runs every part at tiny sizes, one after another in this process (on a CPU
in about a minute), into a scratch folder, so the suite cannot rot between GPU runs.
After a real run, ``python benchmarks/docs_page.py`` writes the tables into the docs'
benchmarks page (docs/benchmarks.md).

On the GPU machine (torch there; lmdb, albumentations and kornia as wheels in .whl):
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=$PWD/src:/tmp/site python3 benchmarks/gpu_suite.py --parts tests,prefetch,...

Usage:
    python benchmarks/gpu_suite.py [--parts all] [--budget-s 3600] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import results_folder
from benchmarks.lib.parts import (
    BENCHMARKS,
    Part,
    finished,
    not_started,
    prepare_environment,
    run_part,
    unknown_parts,
)
from fastload.system import available_cpus


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


PARTS: dict[str, Part] = {
    part.name: part
    for part in [
        Part("tests", "cuda_tests.py", ["--workers", str(max(1, available_cpus() // 2))], 480),
        Part("prefetch", "prefetch.py", [], 420),
        Part("augment", "gpu_augment.py", [], 420),
        Part("detection", "detection_augment.py", ["--batch-size", "64"], 240),
        Part("decode", "gpu_decode.py", [], 240),
        Part("memory", "gpu_memory.py", [], 240),
        Part(
            "end_to_end",
            "end_to_end.py",
            [*end_to_end_options("resnet50"), "--name", "end_to_end"],
            570,
        ),
        Part(
            "end_to_end_r18",
            "end_to_end.py",
            [*end_to_end_options("resnet18"), "--name", "end_to_end_resnet18"],
            570,
            result="end_to_end_resnet18",
        ),
    ]
}

#: Parts whose smoke run would repeat another part's exactly.
SMOKE_SAME_AS = {"end_to_end_r18": "end_to_end"}


def run_part_here(part: Part, out: Path) -> dict[str, object]:
    """A smoke run of one part in this process (each process would spend seconds importing
    torch again); a crash is recorded as a process's would be."""
    script = BENCHMARKS / part.script
    argv, sys.argv = sys.argv, [str(script), "--out", str(out), "--plot", "--smoke"]
    print(f"\n=== {part.name}: {' '.join(sys.argv)} (in this process)", flush=True)
    start = time.perf_counter()
    try:
        runpy.run_module(f"benchmarks.{script.stem}", run_name="__main__", alter_sys=True)
        status = "ok"
    except SystemExit as stop:
        status = "ok" if stop.code in (0, None) else f"failed (exit status {stop.code})"
    except Exception as error:  # the next part still runs, as after a crashed process
        status = f"failed ({type(error).__name__}: {error})"
    finally:
        sys.argv = argv
    seconds = time.perf_counter() - start
    result = out / f"{part.result_name}.json"
    print(f"=== {part.name}: {status} in {seconds:.0f} s", flush=True)
    return {"part": part.name, "benchmark": part.result_name, "status": status,
            "returncode": None, "seconds": round(seconds, 1), "budget_s": part.budget_s,
            "result": result.name if result.exists() else None}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="all", help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument(
        "--budget-s", type=float, default=540,
        help="no part runs past this many seconds from the start (a device call allows 600)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/gpu (cpu/ without CUDA)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, scratch folder")
    args = parser.parse_args()
    names = list(PARTS) if args.parts == "all" else args.parts.split(",")
    if args.smoke:  # the same script as end_to_end at smoke sizes: once is enough
        names = [name for name in names if name not in SMOKE_SAME_AS]
    unknown_parts(names, list(PARTS), "gpu_suite")
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="gpu-suite-")) if args.smoke else results_folder()
    )
    out.mkdir(parents=True, exist_ok=True)

    prepare_environment()
    deadline = time.perf_counter() + args.budget_s
    parts = []
    for name in names:
        part, left = PARTS[name], deadline - time.perf_counter()
        if left < 30:
            parts.append(not_started(part, "out of budget"))
        elif args.smoke:
            parts.append(run_part_here(part, out))
        else:
            parts.append(run_part(part, out, smoke=False, timeout=min(part.budget_s or left, left)))
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
    sys.exit(0 if all(finished(part) for part in parts) else 1)


if __name__ == "__main__":
    main()
