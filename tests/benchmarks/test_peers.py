"""benchmarks/peers.py: a small run measures fastload and the baseline side by side, and a
peer that is not installed is reported in the table, not dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
BASELINE = "classic: torchvision ImageFolder + PIL + DataLoader"
RUN = ["NVIDIA DALI: CPU pipeline", "fastload: LMDB",
       "fastload for a GPU: uint8 batches, not normalised"]  # fmt: skip


@pytest.mark.slow
def test_a_small_run_measures_every_variant_or_says_why_not(tmp_path: Path):
    command = [
        sys.executable, str(BENCHMARKS / "peers.py"), "--images", "40", "--epochs", "2",
        "--rounds", "1", "--batch-size", "8", "--image-size", "32", "--only", "DALI,LMDB,for a GPU",
        "--out", str(tmp_path),
    ]  # fmt: skip
    # DALI hidden from the run, whether or not it is installed here: an `nvidia` package
    # without `dali` stands in front of the real one
    (tmp_path / "hide" / "nvidia").mkdir(parents=True)
    (tmp_path / "hide" / "nvidia" / "__init__.py").touch()
    path = os.pathsep.join(filter(None, [str(tmp_path / "hide"), os.environ.get("PYTHONPATH")]))
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=os.environ | {"PYTHONPATH": path}
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "peers.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert list(rows) == [BASELINE, *RUN]  # the baseline joins any selection, first
    assert result["settings"]["workers"] == 2 and result["baseline"] == BASELINE
    for name in (BASELINE, *RUN[1:]):
        assert rows[name]["per_second"] > 0 and float(rows[name]["CPU ms/image"]) > 0
        assert len(rows[name]["seconds"]) == 1  # one timed epoch: the first is a warm-up
    dali = rows["NVIDIA DALI: CPU pipeline"]
    assert dali["per_second"] is None and dali["seconds"] is None
    assert dali["note"] == "not installed here: ModuleNotFoundError: No module named 'nvidia.dali'"
