"""benchmarks/small_batches.py: its rows and goals are worked out right from the timings,
and a smoke run measures every loader at every batch size on every source, each handing
out the same images."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import small_batches as sb

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SOURCES = ("image folder", "LMDB", "in memory")


@pytest.mark.parametrize(
    "samples, batch_size, min_batches, min_images, epochs",
    [(2000, 1, 120, 0, 1), (2000, 16, 120, 0, 1), (2000, 64, 120, 0, 4), (2000, 16, 250, 0, 2),
     (2000, 64, 250, 0, 8), (40, 64, 4, 0, 4), (40, 16, 4, 0, 2), (40, 4, 4, 0, 1),
     (2000, 1, 120, 8000, 4), (2000, 64, 120, 8000, 4), (2000, 64, 250, 8000, 8),
     (2000, 8, 120, 8001, 5)],
)  # fmt: skip
def test_a_run_is_the_whole_epochs_that_hand_out_enough_batches_and_images(
    samples: int, batch_size: int, min_batches: int, min_images: int, epochs: int
):
    assert sb.epochs_per_run(samples, batch_size, min_batches, min_images) == epochs


def test_rows_compare_each_loader_with_dataloader_and_with_its_own_batch_64_rate():
    # (wall s, CPU s, images, batches) per timed run; the medians are 2.0 and 1.0 s
    results = {
        sb.name("LMDB", 8, "DataLoader"): [(2.0, 3.0, 800, 100), (3.0, 3.0, 800, 100),
                                           (1.0, 1.0, 800, 100)],
        sb.name("LMDB", 8, "FastLoader"): [(1.0, 1.6, 800, 100)],
        sb.name("LMDB", 64, "DataLoader"): "RuntimeError: worker died",
        sb.name("LMDB", 64, "FastLoader"): [(0.5, 0.8, 800, 13)],
    }  # fmt: skip
    rows = {row.name: row for row in sb.rows_of(results)}
    eight = rows["LMDB, batch 8: FastLoader"]
    assert eight.versus == "LMDB, batch 8: DataLoader" and eight.per_second == 800
    assert eight.extra == {"batches/s": "100", "CPU ms/image": "2.000",
                           "of batch-64 rate": "50 %"}  # fmt: skip
    assert rows["LMDB, batch 8: DataLoader"].extra["CPU ms/image"] == "3.750"
    assert rows["LMDB, batch 64: FastLoader"].extra["of batch-64 rate"] == "100 %"
    failed = rows["LMDB, batch 64: DataLoader"]
    assert failed.measurement is None and failed.note == "RuntimeError: worker died"
    # no batch-64 rate to be a share of: no such column
    assert "of batch-64 rate" not in rows["LMDB, batch 8: DataLoader"].extra


def test_goals_are_the_issues_ratios():
    def run(seconds: float, images: int = 800) -> list[tuple[float, float, int, int]]:
        return [(seconds, seconds, images, images)]

    results = {sb.name(source, size, loader): run(1.0)
               for source in ("LMDB", "in memory") for size in (1, 8, 64)
               for loader in sb.LOADERS}  # fmt: skip
    results[sb.name("LMDB", 8, "FastLoader")] = run(1 / 3)  # 3x DataLoader, 3x its batch 64
    results[sb.name("in memory", 1, "FastLoader")] = run(0.5)  # 2x DataLoader
    found = {(g["source"], g["loader"], g["goal"]): g for g in sb.goals(sb.rows_of(results))}
    lmdb = found["LMDB", "FastLoader", "batch 8 over DataLoader's"]
    assert (lmdb["measured"], lmdb["target"], lmdb["met"]) == (3.0, 2.5, True)
    assert found["LMDB", "FastLoader", "batch 8 over its own batch 64"]["met"]
    same = found["in memory", "FastLoader + DataPrefetcher", "batch 8 over its own batch 64"]
    assert (same["measured"], same["met"]) == (1.0, True)
    one = found["in memory", "FastLoader", "batch 1 over DataLoader's"]
    assert (one["measured"], one["met"]) == (2.0, False)
    assert ("LMDB", "FastLoader", "batch 1 over DataLoader's") not in found  # in memory only
    assert not any(source == "image folder" for source, _, _ in found)  # not measured


@pytest.mark.slow
def test_a_smoke_run_measures_every_loader_at_every_batch_size(tmp_path: Path):
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "small_batches.py"), "--smoke", "--plot",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "small_batches.json").read_text())
    assert (tmp_path / "small_batches.png").stat().st_size > 0
    assert {"benchmark", "machine", "settings", "rows", "summary", "table"} <= set(result)
    assert result["settings"]["samples"] == 40 and result["cut_short"] is None
    rows = {row["name"]: row for row in result["rows"]}
    assert list(rows) == [sb.name(source, size, loader) for source in SOURCES
                          for size in sb.BATCH_SIZES for loader in sb.LOADERS]  # fmt: skip
    for source in SOURCES:
        for size in sb.BATCH_SIZES:
            epochs = result["settings"]["epochs_per_run"][str(size)]
            for loader in sb.LOADERS:
                row = rows[sb.name(source, size, loader)]
                # every loader hands out each sample once an epoch
                assert row["note"] is None and row["items"] == 40 * epochs, row
                assert row["versus"] == sb.name(source, size, "DataLoader")
                assert row["per_second"] > 0 and float(row["CPU ms/image"]) > 0
                assert float(row["batches/s"].replace(",", "")) > 0
                if size == sb.REFERENCE:
                    assert row["of batch-64 rate"] == "100 %"
    goals = result["summary"]["goals"]
    assert len(goals) == 2 * (3 * 2 + 1)  # two fastload loaders; a goal more in memory
    assert all(isinstance(goal["met"], bool) for goal in goals)
