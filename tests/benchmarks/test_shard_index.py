"""benchmarks/shard_index.py: a smoke run writes its result, and the index of version 3
costs less than version 2's on every count it measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_a_smoke_run_measures_both_layouts(tmp_path: Path):
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shard_index.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "shard_index.json").read_text())
    assert {"benchmark", "machine", "settings", "rows", "table"} <= set(result)
    old, new = result["rows"]
    assert (old["name"], new["name"]) == ("version 2", "version 3")
    assert old["items"] == new["items"] == 2000
    assert new["pickled MiB"] < old["pickled MiB"] and new["index.json MiB"] < old["index.json MiB"]
