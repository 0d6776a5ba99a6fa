"""What a short GPU window measures first: `make gpu-check`, one command of at most 540 s
(a device call of this project's lent windows runs at most 600), the parts in order, each
within its own budget: the end-to-end comparison with DALI first (what a window is for),
then the decoders alone, memory and the CUDA tests.

  end_to_end_r18  ResNet-18, bf16, channels_last, batch 256: fastload with GPU decode and
                  with CPU decode, torchvision ImageFolder + DataLoader, DALI when
                  installed, the step alone; interleaved rounds of 30-step epochs; the
                  steady rate and each epoch's fill apart, CPU per thread, the JPEG
                  engines' use over each round; GPU decode
                  also with a quarter of the JPEGs decoded by OpenCV beside it
                  (cpu_share=0.25); 3 rounds, one process a variant for all (185 s)
  end_to_end_r50  the same with ResNet-50, 2 rounds (140 s)
  decode          GPUDecoder per backend vs torchvision's nvJPEG call, decode only and
                  decode + random resized crop + flip + normalise to bf16 channels_last;
                  DALI's mixed decode + crop + resize + normalise when installed (45 s)
  memory          reserved CUDA memory over 20 epochs, a process per pipeline, the growth
                  after a 3-epoch warm-up (40 s)
  small_batches   an SRCNN step on 96 px patches at batch sizes 8 and 64: DataLoader,
                  FastLoader, FastLoader + DataPrefetcher, the step alone (60 s)
  cuda_new        the CUDA tests of the paths that had never run on a GPU (35 s):
                  cuda_tests.py --select new
  timm_loader     timm's create_loader (PrefetchLoader) vs fastload's on the GPU, train.py's
                  recipe at 224 px with its training step (ResNet-18), the step alone;
                  5 rounds, with whatever time is left
  cuda_rest       the other CUDA tests, with whatever time is left after it

Each part writes its JSON (and PNG) when it ends; one cut short by its budget keeps what it
measured and says so, and ``check.json`` records every part's status as the run goes.
With CUDA the results go to ``benchmarks/results/gpu/``; without, the same plan runs at
smoke sizes (about a minute and a half on a 2-core CPU) into a scratch folder, so it
cannot rot between GPU runs (``tests/benchmarks/test_gpu_check.py``).

On any GPU machine: ``make gpu-check`` (with ``.venv`` from ``make test``, or an image's
``python3`` that has torch). In this project's lent windows, reached by device calls,
``benchmarks/gpu_check.sh`` is the call (it installs the carried wheels and runs this) and
``benchmarks/gpu_prepare.py`` prepares the wheels and prints the calls; its help gives the
procedure.

A rerun of some parts (``--parts cuda_new,end_to_end_r18``) keeps the other parts' outcomes
in ``check.json``.

Usage:
    python benchmarks/gpu_check.py [--budget-s 540] [--parts A,B] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import machine, results_folder
from benchmarks.lib.parts import (
    Part,
    finished,
    not_started,
    prepare_environment,
    run_part,
    unknown_parts,
)
from fastload.system import available_cpus

#: Peers whose rows say "not installed" where they are missing.
PEERS = ("nvidia.dali", "nvidia.nvimgcodec")


def end_to_end(model: str, name: str, rounds: int, *more: str) -> list[str]:
    """Epochs of 30 steps (7,680 photos), two timed a round after a warm-up: long enough
    to tell the steady rate from the fill, short enough that rounds interleave."""
    workers = str(available_cpus())
    return ["--source", "photos", "--images", "7680", "--epochs", "3", "--rounds", str(rounds),
            "--model", model, "--batch-size", "256", "--image-size", "224",
            "--workers", workers, "--baseline-workers", workers,
            "--decodes", "cpu,gpu-fused", "--storages", "lmdb", "--augment", "gpu",
            "--dtype", "bfloat16", "--dali", "0.65", "--name", name, *more]  # fmt: skip


def cuda_tests(select: str) -> list[str]:
    return ["--select", select, "--name", f"cuda_tests_{select}"]


WORKERS = ["--workers", str(max(1, available_cpus() // 2))]
SMALL_BATCHES = ["--batch-sizes", "8", "64", "--step", "srcnn"]

PLAN = [
    Part("end_to_end_r18", "end_to_end.py",
         end_to_end("resnet18", "end_to_end_resnet18", 3, "--cpu-shares", "0.25"), 185,
         ["--name", "end_to_end_resnet18"], "end_to_end_resnet18"),
    Part("end_to_end_r50", "end_to_end.py", end_to_end("resnet50", "end_to_end", 2), 140,
         ["--name", "end_to_end"], "end_to_end"),
    Part("decode", "gpu_decode.py", ["--images", "1024", "--dali-loads", "0.65"], 45),
    Part("memory", "gpu_memory.py", ["--epochs", "20", "--warmup", "3", "--batches", "5"], 40),
    Part("small_batches", "small_batches.py", [*SMALL_BATCHES, "--sources", "image folder",
         "--device", "cuda", "--workers", str(available_cpus()), "--rounds", "3"], 60,
         [*SMALL_BATCHES, "--sources", "in memory"]),
    Part("cuda_new", "cuda_tests.py", [*cuda_tests("new"), *WORKERS], 45,
         cuda_tests("new"), "cuda_tests_new"),
    Part("timm_loader", "timm_loader.py", ["--configs", "224px", "--device", "cuda",
         "--model", "resnet18", "--images", "1024", "--workers", str(available_cpus()),
         "--rounds", "5"], None, ["--configs", "224px", "--model", "resnet18"]),
    Part("cuda_rest", "cuda_tests.py", [*cuda_tests("rest"), *WORKERS], None,
         cuda_tests("rest"), "cuda_tests_rest"),
]  # fmt: skip


def write_summary(
    path: Path,
    args: argparse.Namespace,
    records: list[dict],
    running: str | None = None,
    earlier: dict[str, dict] | None = None,
) -> None:
    """``check.json``: the plan and each part's outcome so far, the part ``running`` (which
    a run killed during it leaves so) and the rest "not run yet", or as an ``earlier`` run
    left them (a rerun of some parts keeps the others' outcomes)."""
    done = {**(earlier or {}), **{record["part"]: record for record in records}}
    parts = []
    for part in PLAN:
        record = done.get(part.name) or not_started(part, "not run yet")
        if part.name == running:
            record = {**record, "status": "running (left so, the run was stopped during it)"}
        parts.append(record)
    payload = {
        "benchmark": "gpu_check",
        "smoke": args.smoke,
        "machine": machine(),
        "budget_s": args.budget_s,
        "installed": {peer: importlib.util.find_spec(peer.split(".")[0]) is not None
                      and importlib.util.find_spec(peer) is not None for peer in PEERS},
        "parts": parts,
    }  # fmt: skip
    path.write_text(json.dumps(payload, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--budget-s", type=float, default=540, help="the whole plan's time (a device call: 600)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/gpu (cpu/ without CUDA)"
    )
    parser.add_argument(
        "--parts",
        default=None,
        help="comma-separated parts to run (a rerun of those that failed); default: all",
    )
    parser.add_argument(
        "--smoke", action="store_true", default=None, help="default: without CUDA only"
    )
    args = parser.parse_args()
    names = [part.name for part in PLAN]
    chosen = args.parts.split(",") if args.parts else names
    unknown_parts(chosen, names, "gpu_check.py")
    args.smoke = not torch.cuda.is_available() if args.smoke is None else args.smoke
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="gpu-check-")) if args.smoke else results_folder()
    )
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "check.json"
    earlier = (
        {record["part"]: record for record in json.loads(summary.read_text())["parts"]}
        if args.parts and summary.exists()
        else {}
    )

    prepare_environment()
    deadline = time.perf_counter() + args.budget_s
    records: list[dict] = []
    for part in (part for part in PLAN if part.name in chosen):
        left = deadline - time.perf_counter()
        if left < 30:
            records.append(not_started(part, "out of the plan's budget"))
        else:
            write_summary(summary, args, records, running=part.name, earlier=earlier)
            timeout = min(part.budget_s or left, left)
            records.append(run_part(part, out, smoke=args.smoke, timeout=timeout))
        write_summary(summary, args, records, earlier=earlier)
    print(f"\n=== gpu-check ({'smoke sizes, ' if args.smoke else ''}{out})")
    for record in records:
        print(f"{record['part']:<15} {record['status']} ({record['seconds']} s)")
    for record in records:
        if record.get("result"):
            print(
                f"\n{record['part']}:\n{json.loads((out / record['result']).read_text())['table']}"
            )
    # the part with whatever time is left may find none: not a failure
    optional = {part.name for part in PLAN if part.budget_s is None}
    failed = [
        record for record in records
        if not finished(record)
        and not (record["part"] in optional and str(record["status"]).startswith("not started"))
    ]  # fmt: skip
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
