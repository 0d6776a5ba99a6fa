"""The GPU suite must work the first time it meets a GPU: its smoke run exercises every part
here, on the CPU, and its plumbing (interleaving, time limits, the docs page) is tested."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import docs_page, gpu_suite
from benchmarks.lib import common, parts

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

MACHINE_KEYS = {"device", "driver", "cuda", "torch", "torchvision", "cpus"}


def installed(module: str) -> bool:
    """Whether a peer the suite compares with can be imported here; a missing one is
    reported in its row, not dropped."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def assert_measured_or_missing(row: dict, module: str, name: str) -> None:
    if installed(module):
        assert row["per_second"] > 0, name
    else:
        assert row["per_second"] is None and row["note"].startswith("not installed"), name


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu-suite")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_suite.py"), "--smoke", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return out


def rows(out: Path, benchmark: str) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads((out / f"{benchmark}.json").read_text())["rows"]}


@pytest.mark.slow
def test_smoke_run_completes_every_part_with_json_and_png(smoke_results: Path):
    suite = json.loads((smoke_results / "suite-smoke.json").read_text())
    smoked = [name for name in gpu_suite.PARTS if name not in gpu_suite.SMOKE_SAME_AS]
    assert [part["part"] for part in suite["parts"]] == smoked
    assert {part["status"] for part in suite["parts"]} == {"ok"}
    for part in suite["parts"]:
        data = json.loads((smoke_results / part["result"]).read_text())
        assert set(data["machine"]) >= MACHINE_KEYS, part["part"]
        assert (smoke_results / part["result"]).with_suffix(".png").stat().st_size > 1000


@pytest.mark.slow
def test_smoke_prefetch_measures_every_feeding_variant(smoke_results: Path):
    found = rows(smoke_results, "prefetch")
    expected = {
        "step alone (batch already on the device)",
        "usual loop (.cuda() then normalise)",
        "apex data_prefetcher",
        "timm PrefetchLoader",
        "fastload DataPrefetcher, depth 1",
        "fastload DataPrefetcher, depth 2",
        "fastload DataPrefetcher, depth 3",
        "slow loader (2x the step): usual loop",
        "slow loader (2x the step): DataPrefetcher, depth 2",
    }
    assert set(found) == expected
    for name, row in found.items():
        if name == "timm PrefetchLoader":
            assert_measured_or_missing(row, "timm", name)
            continue
        assert row["per_second"] > 0, name
        assert row["data wait"].endswith("%") and row["CPU ms/image"], name


@pytest.mark.slow
def test_smoke_augment_decode_memory_and_end_to_end_rows(smoke_results: Path):
    augment = rows(smoke_results, "gpu_augment")
    for recipe in ("seed", "timm", "policy"):
        measured = [
            name for name, row in augment.items() if name.startswith(recipe) and row["speedup"]
        ]
        kornia = f"{recipe}: Kornia AugmentationSequential"
        assert_measured_or_missing(augment[kornia], "kornia", kornia)
        # all but torch.compile, which smoke skips (and Kornia, where it is missing)
        assert len(measured) == (5 if installed("kornia") else 4), measured
        assert (
            augment[f"{recipe}: fastload.gpu + torch.compile"]["note"] == "not run (--no-compile)"
        )
    decode = rows(smoke_results, "gpu_decode")
    dali_rows = [name for name in decode if name.startswith("NVIDIA DALI")]
    assert dali_rows
    for name in dali_rows:
        assert_measured_or_missing(decode.pop(name), "nvidia.dali", name)
    nvimgcodec = {name: row for name, row in decode.items()
                  if "nvimgcodec" in name or "nvImageCodec" in name}  # fmt: skip
    assert len(nvimgcodec) == 3
    for name, row in nvimgcodec.items():
        assert_measured_or_missing(row, "nvidia.nvimgcodec", name)
    raw = nvimgcodec["nvImageCodec Decoder.decode, its own batched call (decode only)"]
    for row in nvimgcodec.values():  # each a share of nvImageCodec's own call
        if row["per_second"] is not None and row is not raw:
            assert row["of nvImageCodec's own call"] == (
                f"{100 * row['per_second'] / raw['per_second']:.0f}%"
            )
    others = [row for name, row in decode.items() if name not in nvimgcodec]
    assert len(others) == 5 and all(row["per_second"] > 0 for row in others)
    for row in others:  # the threads that used the CPU, most first, in ms per image
        shares = [entry.rsplit(" ", 1) for entry in row["CPU ms/image by thread"].split(", ")]
        ms = [float(value) for _, value in shares]
        assert 1 <= len(shares) <= 3 and ms == sorted(ms, reverse=True), row
    memory = json.loads((smoke_results / "gpu_memory.json").read_text())
    assert [len(epochs) for epochs in memory["summary"]["per_epoch"].values()] == [3, 3]
    processes = list(memory["summary"]["process"].values())  # one allocator each
    assert len(set(processes)) == 2 and os.getpid() not in processes
    for row in memory["rows"]:
        assert row["resident growth after the warm-up MiB"].startswith(("+", "-"))
    end_to_end = rows(smoke_results, "end_to_end")
    dali = end_to_end.pop("NVIDIA DALI, CPU decode")
    assert_measured_or_missing(dali, "nvidia.dali", "DALI")
    assert set(end_to_end) == {
        "baseline: torchvision + DataLoader, 2 workers",
        "fastload, image folder, CPU decode",
        "fastload, LMDB, GPU decode",
        "fastload, LMDB, GPU-FUSED decode, 25% on the CPU",
        "fastload, LMDB, GPU-FUSED decode",
        "the step alone: one cached batch",
    }
    assert all(row["per_second"] > 0 for row in end_to_end.values())


@pytest.mark.slow
def test_the_docs_page_is_written_from_the_results(smoke_results: Path, tmp_path: Path):
    results = tmp_path / "results"
    shutil.copytree(smoke_results, results / "gpu")
    page = tmp_path / "docs" / "benchmarks.md"
    assert docs_page.write(results, page)
    text = page.read_text()
    for name, notes in docs_page.NOTES.items():
        if name.startswith("gpu/") and (results / f"{name}.json").exists():
            assert f"## {docs_page.heading(name)}" in text and notes.title in text, name
    assert json.loads((smoke_results / "prefetch.json").read_text())["table"] in text
    assert "![gpu/prefetch](../results/gpu/prefetch.png)" in text
    assert not docs_page.write(results, page)  # a second run changes nothing


def test_interleaved_runs_rounds_in_turn_and_isolates_a_failure():
    calls = []

    def variant(name: str, fail: bool = False):
        def run():
            calls.append(name)
            if fail:
                raise RuntimeError("no such kernel\nsecond line")
            return len(calls)

        return run

    results = common.interleaved(
        {"a": variant("a"), "b": variant("b", fail=True), "c": variant("c")}, rounds=2, warmup=1
    )
    assert calls == ["a", "b", "c", "a", "c", "a", "c"]
    assert results == {"a": [4, 6], "b": "RuntimeError: no such kernel", "c": [5, 7]}


def test_a_part_that_crashes_or_overruns_is_recorded(tmp_path: Path):
    crash = tmp_path / "crash.py"
    crash.write_text("raise SystemExit(3)\n")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(60)\n")
    crashed = parts.run_part(parts.Part("crash", str(crash)), tmp_path, smoke=True, timeout=30)
    assert crashed["status"] == "failed (exit status 3)" and crashed["result"] is None
    overran = parts.run_part(parts.Part("sleeper", str(sleeper)), tmp_path, smoke=True, timeout=1)
    assert overran["status"] == "killed after 1 s: over its budget" and overran["seconds"] < 30
    assert not parts.finished(crashed) and not parts.finished(overran)


def test_without_gpu_results_the_page_says_nothing_was_measured(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    shutil.copy(common.RESULTS / "cpu" / "lmdb_vs_files.json", tmp_path / "cpu")
    text = docs_page.render(tmp_path, tmp_path / "benchmarks.md")
    assert "**No GPU run yet.**" in text and "## cpu: lmdb_vs_files" in text


def test_unknown_part_is_refused_in_one_line():
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_suite.py"), "--parts", "tests,warp"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        "gpu_suite: unknown part(s) warp; choose from " + ", ".join(gpu_suite.PARTS)
    )
