"""Prepare a lent GPU window here, then print the exact device calls that run `make gpu-check`.

This is for this project's own GPU runs: a GPU machine lent now and then, reached by device
calls from a machine without one. On a GPU machine of your own, run `make gpu-check` there
(docs/contributing.md). The window: 15 minutes of device time in all, counting the machine's
start (one to two minutes), every copy, every idle wait and every call; one call runs at
most 10 minutes and carries at most 64 MiB (the working tree included); a machine idle for
30 s is given back, with whatever was staged on it.

Run this on the machine without a GPU before the first device call. It

1. fetches every wheel the GPU image lacks into ``.whl`` (``gpu_wheels.sh``: lmdb,
   albumentations and their needs, nvImageCodec, nvJPEG, Kornia);
2. fetches NVIDIA DALI and its needs into ``.whl-big`` and, where they fit the window,
   cuts them into ``.stage/1``, ``.stage/2``, ... (DALI's wheels are about 222 MiB: four
   staging calls);
3. measures what each call carries, estimates each call's device time, and prints the
   sequence: the staging calls back to back, then the one call of ``gpu_check.sh``.

DALI is staged only if the whole sequence leaves ``--spare-s`` of the device time for a
rerun; otherwise the plan runs without it, its rows say "not installed", and this says
why (``--dali always`` stages it anyway). Sizes are measured; times are estimates from
``--start-s``, ``--call-s`` and ``--mib-per-s`` (no GPU machine is reachable from here to
measure them).

The procedure, for whoever has the window:

1. Ask the device tool's ``status`` (it costs nothing): ``can_start_another`` says whether
   the session was lent a machine.
2. Here: ``.venv/bin/python benchmarks/gpu_prepare.py``.
3. Make the printed calls in order: staging calls, if any, back to back; then the one call
   that matters: command ``bash benchmarks/gpu_check.sh``, carry ``[".whl"]``, ``timeout_s``
   600. It installs the wheels, runs the plan, writes the benchmarks page and puts
   ``gpu-results.tgz`` and ``gpu-check.log`` into ``$OUT``.
4. Call ``give_back`` at once unless a part must run again. A rerun names its parts,
   ``python3 benchmarks/gpu_check.py --parts cuda_new,end_to_end_r18 --budget-s 300``,
   after the same install line as ``gpu_check.sh``; ``check.json`` keeps the other parts'
   outcomes. Decide the rerun while the first call's reply is fresh, or plan on a new
   start.
5. Here: ``tar xzf FILES_AT/gpu-results.tgz`` (the reply's ``files_at`` folder), read the
   log, run ``python benchmarks/docs_page.py`` (the headline tables of README.md and
   docs/index.md follow the new results), and commit them with ``benchmarks/results/gpu/``
   and ``docs/benchmarks.md``.

What the first run on an H200 taught: every test collects through the root ``conftest.py``,
so what it imports must travel in ``.whl``; one device-side assert fails every later CUDA
test of its pytest worker, so read the first failure of each worker, not the count; and a
process's start and end are not in its table (``end_to_end.py`` prints what each process
took: a DataLoader with persistent pinned workers once took 85 s to exit).

Usage:
    python benchmarks/gpu_prepare.py [--dali auto|always|never] [--device-s 900]
        [--spare-s 180] [--start-s 120] [--call-s 15] [--mib-per-s 20]
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.gpu_check import PLAN

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
CALL_LIMIT_MIB = 64  # what one device call carries, the working tree included
PLAN_S = 540  # gpu_check.py's --budget-s default
AROUND_PLAN_S = 40  # installing the wheels, the docs page, packing the results (estimate)
DALI = ["nvidia-dali-cuda130==2.4.0", "nvidia-libnvcomp-cu13==5.3.0.16", "astunparse==1.6.3",
        "gast==0.7.0", "optree==0.20.0", "makefun==1.16.0", "nvtx==0.2.17",
        "libcst==1.9.0"]  # fmt: skip
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64"]  # fmt: skip


@dataclass
class Call:
    carry: list[str]
    mib: float  # the working tree and the carried paths
    command: str
    seconds: float  # estimated device time, the start not included


def size_mib(paths: list[Path]) -> float:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*"))
               if f.is_file()) / MIB  # fmt: skip


def working_tree_mib() -> float:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout  # fmt: skip
    paths = [ROOT / name for name in listed.decode().split("\0") if name]
    return size_mib([path for path in paths if path.is_file()])


def ignore_locally(*patterns: str) -> None:
    exclude = ROOT / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    present = exclude.read_text().splitlines() if exclude.exists() else []
    with exclude.open("a") as file:
        file.writelines(f"{pattern}\n" for pattern in patterns if pattern not in present)


def fetch_dali(folder: Path) -> list[Path]:
    """DALI's wheels for the GPU image's Python 3.12, downloaded once."""
    folder.mkdir(exist_ok=True)
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                    *platforms, "-d", str(folder), *DALI], check=True)  # fmt: skip
    return sorted(folder.glob("*.whl"))


def stage(wheels: list[Path], stage_root: Path, room_mib: float) -> list[Path]:
    """The wheels cut into parts of at most ``room_mib``, packed into as few folders of at
    most ``room_mib`` as first-fit by decreasing size finds."""
    shutil.rmtree(stage_root, ignore_errors=True)
    room = int(room_mib * MIB)
    pieces = [(wheel, index, start) for wheel in wheels
              for index, start in enumerate(range(0, wheel.stat().st_size, room))]  # fmt: skip

    def length(piece: tuple[Path, int, int]) -> int:
        return min(room, piece[0].stat().st_size - piece[2])

    folders: list[tuple[Path, list[int]]] = []  # each folder and its bytes used
    for wheel, index, start in sorted(pieces, key=length, reverse=True):
        size = length((wheel, index, start))
        folder = next((f for f, used in folders if used[0] + size <= room), None)
        if folder is None:
            folder = stage_root / str(len(folders) + 1)
            folder.mkdir(parents=True)
            folders.append((folder, [0]))
        next(used for f, used in folders if f == folder)[0] += size
        with wheel.open("rb") as source:
            source.seek(start)
            (folder / f"{wheel.name}.part-{index:02d}").write_bytes(source.read(size))
    return [folder for folder, _ in folders]


def seconds_for(mib: float, args: argparse.Namespace) -> float:
    return args.call_s + mib / args.mib_per_s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dali", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--device-s", type=float, default=900, help="the session's device time")
    parser.add_argument("--spare-s", type=float, default=180, help="left over for a rerun")
    parser.add_argument("--start-s", type=float, default=120, help="a machine's start (estimate)")
    parser.add_argument("--call-s", type=float, default=15, help="each call's overhead (estimate)")
    parser.add_argument("--mib-per-s", type=float, default=20, help="transfer rate (estimate)")
    args = parser.parse_args()
    if sum(part.budget_s or 0 for part in PLAN) > PLAN_S:
        raise SystemExit(f"gpu_prepare: the plan's budgets pass {PLAN_S} s")

    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_wheels.sh")], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    ignore_locally("/.whl-big/", "/.stage/")
    tree, wheels = working_tree_mib(), size_mib([ROOT / ".whl"])
    main_mib = tree + wheels
    main_call = Call([".whl"], main_mib, "bash benchmarks/gpu_check.sh",
                     seconds_for(main_mib, args) + PLAN_S + AROUND_PLAN_S)  # fmt: skip
    dali_wheels = [] if args.dali == "never" else fetch_dali(ROOT / ".whl-big")
    dali_mib = size_mib(dali_wheels)
    room = CALL_LIMIT_MIB - tree - 1  # a MiB kept for the tree's growth
    staging_calls = math.ceil(dali_mib / room)
    staging_s = sum(seconds_for(min(room, dali_mib - i * room) + tree, args)
                    for i in range(staging_calls))  # fmt: skip
    without = args.start_s + main_call.seconds
    fits = without + staging_s <= args.device_s - args.spare_s
    calls = []
    if dali_wheels and (fits or args.dali == "always"):
        for folder in stage(dali_wheels, ROOT / ".stage", room):
            name = folder.relative_to(ROOT).as_posix()
            mib = tree + size_mib([folder])
            calls.append(Call([name], mib, f"mkdir -p /tmp/stage && cp {name}/* /tmp/stage/",
                              seconds_for(mib, args)))  # fmt: skip
    else:
        shutil.rmtree(ROOT / ".stage", ignore_errors=True)
    calls.append(main_call)

    print("Device calls for `make gpu-check` (sizes measured here, seconds estimated):")
    print(f"  every call carries the working tree: {tree:.1f} MiB")
    print(f"  .whl (lmdb, albumentations, nvImageCodec, nvJPEG, Kornia): {wheels:.1f} MiB")
    for number, call in enumerate(calls, 1):
        print(f"\n{number}. carry {call.carry}, timeout_s "
              f"{600 if call is main_call else 120}, {call.mib:.1f} MiB, "
              f"about {call.seconds + (args.start_s if number == 1 else 0):.0f} s"
              f"{' (the machine starts)' if number == 1 else ''}:\n   {call.command}")  # fmt: skip
    total = args.start_s + sum(call.seconds for call in calls)
    print(
        f"\nIn all about {total:.0f} s of {args.device_s:.0f} s: "
        f"{args.device_s - total:.0f} s left for a rerun (wanted: {args.spare_s:.0f} s)"
    )
    if not dali_wheels:
        print("DALI: not fetched (--dali never): its rows will say 'not installed'.")
    elif len(calls) > 1:
        print(
            f"DALI: staged, {dali_mib:.1f} MiB in {len(calls) - 1} calls; make them back "
            "to back (a machine idle for 30 s is given back, the staged parts with it)."
        )
    else:
        print(
            f"DALI: not staged. Its wheels ({dali_mib:.1f} MiB) take {staging_calls} calls, "
            f"about {staging_s:.0f} s: {without + staging_s:.0f} s in all would leave "
            f"{args.device_s - without - staging_s:.0f} s, under {args.spare_s:.0f} s. The "
            "plan runs without it; its rows say 'not installed' (--dali always stages it)."
        )
    print(
        "\nThen, here: tar xzf FILES_AT/gpu-results.tgz, read FILES_AT/gpu-check.log, run "
        "python benchmarks/docs_page.py (README.md's and docs/index.md's headline tables), "
        "commit benchmarks/results/gpu/ and the pages; call give_back unless you rerun."
    )


if __name__ == "__main__":
    main()
