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
    assert names == [
        f"{library} create_loader, {config}{policy}"
        for config in ("64px", "224px")
        for library in ("timm", "fastload")
        for policy in (", inc1", "")
    ]
    for row in result["rows"]:  # each against timm's row of its size, without inc1
        assert row["versus"] == "timm create_loader, " + row["name"].split(", ")[1]
        assert row["seconds"] is not None or row["note"].startswith("failed: ")
    ops = result["summary"]["per_op_ms_per_batch"]
    assert set(ops) == {"64px", "224px"}
    assert all(cost["timm"] > 0 and cost["fastload"] > 0 for cost in ops["64px"].values())
    assert len(ops["64px"]) == 5
