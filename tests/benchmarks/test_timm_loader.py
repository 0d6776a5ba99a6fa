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


@pytest.mark.slow
def test_smoke_run_with_a_training_step_has_the_step_alone_as_its_ceiling(tmp_path):
    out = tmp_path / "cpu"
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "timm_loader.py"), "--smoke", "--out", str(out),
         "--configs", "64px", "--model", "resnet18"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    result = json.loads((out / "timm_loader.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert list(rows) == [
        "timm create_loader, 64px, inc1", "timm create_loader, 64px",
        "fastload create_loader, 64px, inc1", "fastload create_loader, 64px",
        "the step alone, 64px",
    ]  # fmt: skip
    assert rows["the step alone, 64px"]["of the step alone"] == "100%"
    alone = rows["the step alone, 64px"]["per_second"]
    for row in rows.values():
        if row["per_second"] is not None:
            share = round(100 * row["per_second"] / alone)
            assert row["of the step alone"] == f"{share}%"
    assert result["settings"]["model"] == "resnet18"


def test_each_row_is_a_share_of_its_own_configs_step_alone():
    from benchmarks.lib.common import Row
    from benchmarks.timm_loader import of_the_step_alone
    from fastload.tools.measure import Measurement

    rows = [
        Row("timm create_loader, 64px", Measurement((2.0,)), 100),  # 50 images/s
        Row("the step alone, 64px", Measurement((0.5,)), 100),  # 200
        Row("fastload create_loader, 224px", Measurement((1.0,)), 100),  # 100
        Row("the step alone, 224px", Measurement((0.8,)), 100),  # 125
        Row("fastload create_loader, 224px, inc1", None, 0, note="failed: x"),
    ]
    of_the_step_alone(rows)
    assert [row.extra.get("of the step alone") for row in rows] == [
        "25%", "100%", "80%", "100%", None,
    ]  # fmt: skip
