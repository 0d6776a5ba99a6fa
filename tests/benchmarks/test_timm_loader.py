"""benchmarks/timm_loader.py runs at smoke sizes and writes its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("timm")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_smoke_run_writes_both_loaders(tmp_path):
    out = tmp_path / "cpu"
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "timm_loader.py"), "--smoke", "--out", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    result = json.loads((out / "timm_loader.json").read_text())
    names = [row["name"] for row in result["rows"]]
    assert names == ["timm create_loader", "fastload create_loader"]
