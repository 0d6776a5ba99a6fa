"""benchmarks/hf_datasets.py: a smoke run measures every variant, HF's recipe and the
adapter on the same images, the numeric rows through each loader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("datasets")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_a_smoke_run_measures_every_variant(tmp_path: Path):
    command = [sys.executable, str(BENCHMARKS / "hf_datasets.py"), "--smoke", "--out",
               str(tmp_path)]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "hf_datasets.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert list(rows) == [
        "HF recipe: set_transform (PIL + v2), DataLoader",
        "from_hf + FastLoader, DataPrefetcher normalises",
        "DataLoader",
        "FastLoader",
        "FastLoader(seed=0)",
    ]
    assert all(row["per_second"] > 0 and row["note"] is None for row in rows.values())
    assert rows["FastLoader"]["versus"] == "DataLoader"
    assert rows["from_hf + FastLoader, DataPrefetcher normalises"]["items"] == 20
    assert float(rows["DataLoader"]["CPU ms/row"]) > 0
