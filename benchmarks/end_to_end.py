"""End to end: the plain torchvision pipeline vs fastload's, files to a normalised batch
on the device, alone or with a training step.

Each variant runs benchmarks/train_harness.py in its own process on generated JPEGs
(``--images``, 500x375, as a folder and as an LMDB file), one process for all its rounds
(its start is paid once); rounds are interleaved (every variant once, then again), each
round runs ``--epochs`` epochs of a variant and the first is a warm-up; the table holds
the median over the timed epochs.

- baseline: torchvision ImageFolder, PIL transforms (RandomResizedCrop, flip,
  ColorJitter 0.2/0.2/0.2, ToTensor, Normalize), DataLoader with each of
  ``--baseline-workers`` workers (persistent, pin_memory on a GPU), ``.to(device)`` in
  the loop;
- fastload: FastLoader + OpenCV decode in the workers (``cpu``) or GPUDecoder (``gpu``,
  or ``gpu-fused``: crop, flip and normalise in the decoder's one pass), for each of
  ``--decodes``, from each of ``--storages`` (the folder, the LMDB file), the rest of
  the augmentation where ``--augment`` says, DataPrefetcher (its producer thread with a
  decoder);
- with ``--cpu-shares``, ``gpu-fused`` again with each of those shares of the JPEGs
  decoded by OpenCV on the producer's threads beside the GPU (``GPUDecoder(cpu_share=)``);
- the step alone: one batch of fastload's, already on the device, trained on for an
  epoch's steps: the ceiling a pipeline can reach;
- NVIDIA DALI (``--dali``, a list of ``hw_decoder_load`` values on a GPU): its ImageNet
  recipe on the folder, the ``gpu-fused`` augmentation; reported as not installed where
  it is not (``bash benchmarks/install_peers.sh``).

Columns: images/s over whole epochs, data wait (on a GPU: its idle time between steps,
from CUDA events, nothing synchronised inside the loop; on a CPU: the loop's wait for
each batch), CPU ms per image and CPU cores busy (this process and workers). With a model
on a GPU, also: the rate as a share of the step alone's, the steady rate (the steps after
each epoch's first tenth) and the fill (the wait for each epoch's first batch) apart, and
the CPU ms per image of the main process's threads: the loop, and fastload's producer
(its reading thread and its device thread); and the JPEG engines' use (nvidia-smi every
100 ms over each round's epochs, warm-up included: a window of some seconds).

Usage:
    python benchmarks/end_to_end.py [--images 1000] [--epochs 4] [--rounds 1]
        [--model none] [--batch-size 64] [--image-size 160] [--workers auto]
        [--baseline-workers 0,2] [--decodes cpu,gpu,gpu-fused] [--storages folder,lmdb]
        [--augment cpu|gpu] [--dtype float32|bfloat16] [--dali 0.65,1] [--cpu-shares 0.25]
        [--budget-s S]
        [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import (
    Budget,
    Row,
    budget_argument,
    describe,
    device_name,
    plot,
    report,
    results_folder,
)
from benchmarks.lib.data import data_sets
from benchmarks.lib.engines import combined as combined_engines
from benchmarks.lib.engines import describe as describe_engines
from benchmarks.train_harness import READY
from fastload.tools.measure import Measurement

HARNESS = Path(__file__).resolve().parent / "train_harness.py"


class Served:
    """One variant's ``train_harness.py --serve`` process, kept for all the rounds: its start
    (imports, CUDA, the model, the workers) is paid once; each round asks it for its epochs.

    >>> variant = Served(folder, ["--baseline"])  # doctest: +SKIP
    >>> variant.epochs(3, timeout=60)  # three epochs' metrics  # doctest: +SKIP
    """

    def __init__(self, data: Path, options: list[str]) -> None:
        # a file, not a pipe: a full pipe of warnings would stall the harness mid-round
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (read until the object ends)
        self.process = subprocess.Popen(
            [sys.executable, str(HARNESS), str(data), "--json", "--serve", *options],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.started = False
        self.start_seconds = 0.0  # imports, CUDA, the model, the pipeline: once
        self.engines: list[dict | str] = []  # each round's JPEG engine use, on a GPU

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # the process ended

    def epochs(self, count: int, timeout: float) -> list[dict]:
        """``count`` more epochs' metrics, within ``timeout`` seconds (its start included on
        the first call)."""
        deadline = time.monotonic() + timeout
        if not self.started:
            began = time.monotonic()
            self._until_ready(deadline, timeout)
            self.start_seconds = time.monotonic() - began
            self.started = True
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(f"{count}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._failure() from None
        return self._until_ready(deadline, timeout)

    def _until_ready(self, deadline: float, timeout: float) -> list[dict]:
        measured = []
        while True:
            left = deadline - time.monotonic()
            try:  # no time budget: wait as long as it takes
                line = self.lines.get(timeout=max(0.0, left) if math.isfinite(left) else None)
            except queue.Empty:
                self.process.kill()
                self.close()
                raise RuntimeError(f"stopped after {timeout:.0f} s, the time budget") from None
            if line is None:
                raise self._failure()
            if line == READY:
                return measured
            if line.startswith("{"):
                parsed = json.loads(line)
                if "jpeg_engines" in parsed:
                    self.engines.append(parsed["jpeg_engines"])
                else:
                    measured.append(parsed)

    def _failure(self) -> RuntimeError:
        self.close()
        self.errors.seek(0)
        stderr = self.errors.read()
        print(stderr[-3000:], file=sys.stderr)
        lines = stderr.strip().splitlines()
        return RuntimeError(lines[-1] if lines else f"exit status {self.process.returncode}")

    def close(self) -> None:
        """End the process: its input's end, then a kill if it does not end in a minute."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def variants(args, folder: Path, database: Path) -> dict[str, tuple[Path, list[str]] | str]:
    """Each variant's data and options, or why it cannot run."""
    found: dict[str, tuple[Path, list[str]] | str] = {}
    for workers in args.baseline_workers.split(","):
        name = f"baseline: torchvision + DataLoader, {workers} workers"
        found[name] = (folder, ["--baseline", "--workers", workers])
    if args.model != "none":  # the ceiling: the step on one cached batch, loading free
        found["the step alone: one cached batch"] = (database, ["--cached", "--workers", "0"])
    storages = {"folder": ("image folder", folder), "lmdb": ("LMDB", database)}
    for decode in args.decodes.split(","):
        for storage in args.storages.split(","):
            label, data = storages[storage]
            options = ["--decode", decode, "--workers", args.workers]
            if args.augment and decode != "gpu-fused":  # gpu-fused: the decoder's recipe
                options += ["--augment", args.augment]
            found[f"fastload, {label}, {decode.upper()} decode"] = (data, options)
            if decode == "gpu-fused":  # GPUDecoder's cpu_share: OpenCV decodes beside it
                for share in filter(None, args.cpu_shares.split(",")):
                    name = f"fastload, {label}, GPU-FUSED decode, {float(share):.0%} on the CPU"
                    found[name] = (data, [*options, "--cpu-share", share])
    installed = importlib.util.find_spec("nvidia") is not None and (
        importlib.util.find_spec("nvidia.dali") is not None
    )
    cuda = torch.cuda.is_available()
    for load in args.dali.split(",") if args.dali else []:
        name = (
            f"NVIDIA DALI, mixed decode, hw_decoder_load {load}"
            if cuda
            else "NVIDIA DALI, CPU decode"
        )
        found[name] = (
            (folder, ["--dali", "--hw-decoder-load", load, "--workers", args.workers])
            if installed
            else "not installed (bash benchmarks/install_peers.sh)"
        )
        if not cuda:
            break  # hw_decoder_load means nothing without the GPU's decoders
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument(
        "--source", choices=["synthetic", "photos"], default="synthetic",
        help="photo-like generated images, or crops of real photographs (scikit-image)",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=4, help="per process, the first untimed")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (each: --epochs)")
    parser.add_argument("--model", default="none", help="a torchvision model, or none")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--workers", default="auto", help="fastload's workers")
    parser.add_argument("--baseline-workers", default="0,2")
    parser.add_argument("--decodes", default="cpu", help="fastload decode modes: cpu,gpu,gpu-fused")
    parser.add_argument("--storages", default="folder,lmdb", help="fastload's data: folder,lmdb")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
        help="the batch's dtype as each pipeline hands it over",
    )  # fmt: skip
    parser.add_argument(
        "--dali", default="", help="NVIDIA DALI's hw_decoder_load values to run (on a CPU: one)"
    )
    parser.add_argument(
        "--cpu-shares", default="",
        help="gpu-fused also with each of these GPUDecoder cpu_share values (e.g. 0.25)",
    )  # fmt: skip
    parser.add_argument("--augment", choices=["cpu", "gpu"], default=None)
    budget_argument(parser)
    parser.add_argument("--name", default="end_to_end", help="the result files' name")
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, two rounds, one variant of each code path"
    )
    args = parser.parse_args()
    if args.smoke:
        args.images, args.epochs, args.rounds, args.model = 40, 2, 2, "squeezenet1_1"
        args.batch_size, args.image_size, args.baseline_workers = 8, 32, "2"
        args.decodes, args.augment, args.dali = "cpu,gpu,gpu-fused", "gpu", "0.65"
        args.cpu_shares = "0.25"

    budget = Budget(args.budget_s)  # making the data counts too
    started = time.perf_counter()
    folder, database = data_sets(args.images, args.source)
    print(f"the data: {time.perf_counter() - started:.1f} s (made once, then reused)", flush=True)
    common = ["--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
              "--model", args.model, "--dtype", args.dtype]  # fmt: skip
    found = variants(args, folder, database)
    if args.smoke:  # one of each code path: the baseline, CPU decode, GPU decodes, DALI
        keep = [name for name in found if "baseline" in name or "folder, CPU" in name
                or "LMDB, GPU" in name or "DALI" in name or "alone" in name]  # fmt: skip
        found = {name: found[name] for name in keep}
    epochs: dict[str, list[dict] | str] = {
        name: found[name] if isinstance(found[name], str) else [] for name in found
    }
    served: dict[str, Served] = {}
    took: dict[str, float] = {}  # each variant's last round, without its process's start
    try:
        for round_index in range(args.rounds):
            for name, variant in found.items():
                if isinstance(epochs[name], str) or isinstance(variant, str):
                    continue
                data, options = variant
                expected = expected_round(name, took, [p.start_seconds for p in served.values()])
                if not budget.allows(max(1.2 * expected, 10), f"round {round_index + 1}"):
                    if not epochs[name]:
                        epochs[name] = f"not run: {budget.cut_short}"
                    continue
                started = time.perf_counter()
                try:
                    if name not in served:
                        served[name] = Served(data, [*common, *options])
                    epochs[name] += served[name].epochs(args.epochs, budget.left())[1:]
                except RuntimeError as error:  # the other variants still run
                    epochs[name] = describe(error)
                elapsed = time.perf_counter() - started
                start = served[name].start_seconds if round_index == 0 and name in served else 0.0
                took[name] = elapsed - start
                # each round's first epoch is not in the table: say what a round cost
                print(
                    f"{name}: its round took {took[name]:.1f} s"
                    + (f" after its process's start, {start:.1f} s" if start else ""),
                    flush=True,
                )
            engines = {name: process.engines for name, process in served.items()}
            result = write_report(args, found, epochs, budget, engines)  # each round: kept
            print(f"round {round_index + 1} of {args.rounds} done", flush=True)
    finally:
        for process in served.values():
            process.close()
    if args.plot:
        plot(result)


def expected_round(name: str, took: dict[str, float], starts: list[float]) -> float:
    """The seconds ``name``'s next round should take: its last round's epochs; for a
    variant not started yet, the longest round so far and the longest process start.

    >>> expected_round("b", {"a": 4.0}, [9.0]), expected_round("a", {"a": 4.0}, [9.0])
    (13.0, 4.0)
    """
    if name in took:
        return took[name]
    return max(took.values(), default=0.0) + max(starts, default=0.0)


THREADS = {"MainThread": "loop", "fastload-producer": "read", "fastload-producer-device": "device"}


def by_thread(measured: list[dict]) -> str:
    """Median CPU ms per image of the loop's and the producer's threads, the threads of no
    Python name (OpenMP's, CUDA's, nvJPEG's) as native, the rest as other."""
    shares: dict[str, list[float]] = {}
    for epoch in measured:
        named: dict[str, float] = {}
        for thread, ms in epoch.get("thread_cpu_ms_per_image", {}).items():
            label = THREADS.get(thread, "native" if thread.endswith("(native)") else "other")
            named[label] = named.get(label, 0.0) + ms
        for label, ms in named.items():
            shares.setdefault(label, []).append(ms)
    order = [*THREADS.values(), "native", "other"]
    return (
        ", ".join(
            f"{label} {statistics.median(shares[label]):.2f}" for label in order if label in shares
        )
        or "-"
    )


def median_of(measured: list[dict], key: str) -> float | None:
    values = [epoch[key] for epoch in measured if epoch.get(key) is not None]
    return statistics.median(values) if values else None


def engine_use(rounds: list[dict | str]) -> str:
    """The JPEG engines' use over a variant's rounds (each from nvidia-smi every 100 ms)."""
    measured = [stats for stats in rounds if isinstance(stats, dict)]
    if measured:
        return describe_engines(combined_engines(measured))
    return next((str(stats) for stats in rounds), "-")


def write_report(
    args,
    found: dict,
    epochs: dict[str, list[dict] | str],
    budget: Budget,
    engines: dict[str, list[dict | str]] | None = None,
) -> Path:
    reference = next(name for name in found if name.startswith("baseline") and " 0 " not in name)
    alone = epochs.get("the step alone: one cached batch")
    ceiling = median_of(alone, "images_per_second") if isinstance(alone, list) else None
    rows = []
    for name, measured in epochs.items():
        if isinstance(measured, str) or not measured:
            rows.append(Row(name, None, 1, note=measured or "not run yet"))
            continue
        # One "item" per image: the median seconds per image gives images/s.
        seconds = tuple(1.0 / epoch["images_per_second"] for epoch in measured)
        waits = [e["data_wait_fraction"] for e in measured if e["data_wait_fraction"] is not None]
        cpu = statistics.median(e["cpu_seconds_per_image"] for e in measured)
        rate = statistics.median(e["images_per_second"] for e in measured)
        extra = {
            "CPU ms/image": f"{1000 * cpu:.2f}",
            "CPU cores busy": f"{cpu * rate:.1f}",
            "data wait": f"{100 * statistics.median(waits):.1f}%" if waits else "-",
        }
        steady, fill = (
            median_of(measured, "steady_images_per_second"),
            median_of(measured, "fill_seconds"),
        )
        if ceiling is not None:
            extra["of the step alone"] = f"{100 * rate / ceiling:.0f}%"
        if steady is not None and fill is not None:
            extra["steady images/s"] = f"{steady:,.0f}"
            extra["epoch fill ms"] = f"{1000 * fill:.0f}"
        extra["CPU ms/image by thread"] = by_thread(measured)
        if engines and engines.get(name):
            extra["JPEG engines (each round)"] = engine_use(engines[name])
        rows.append(Row(name, Measurement(seconds), 1, extra))
    cuda = torch.cuda.is_available()
    print(f"device: {device_name()}" + ("" if cuda else ": no GPU, the pipeline runs on the CPU"))
    return report(
        args.name,
        rows,
        baseline=reference,
        unit="images",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {
            "device": "cuda" if cuda else "cpu",
            "data": f"{args.images} JPEG 500x375, {args.source}",
        },
        out=args.out,
        cut_short=budget.cut_short,
    )


if __name__ == "__main__":
    main()
