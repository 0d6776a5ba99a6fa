"""benchmarks/frameworks.py at smoke sizes: every framework's variants run in their own
processes and land in the table with their ratios, so the benchmark cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="needs Lightning: pip install '.[lightning]'")
pytest.importorskip("accelerate", reason="needs Accelerate: pip install '.[accelerate]'")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_every_framework_and_data_path_is_measured_against_its_usual_path(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "frameworks.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "frameworks.json").read_text())
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) == [
        "fastload, its own loop",
        "Lightning: DataLoader + torchvision v2",
        "Lightning: fastload (DataPrefetcher from train_dataloader)",
        "Accelerate: DataLoader + torchvision v2 (prepared)",
        "Accelerate: fastload (DataPrefetcher on accelerator.device)",
    ]
    for name, row in rows.items():
        assert row["per_second"] > 0 and row["CPU ms/image"], name
        assert row["of fastload's own loop"].endswith("x"), name
    assert rows["Lightning: fastload (DataPrefetcher from train_dataloader)"]["versus"] == (
        "Lightning: DataLoader + torchvision v2"
    )
    assert data["cut_short"] is None
