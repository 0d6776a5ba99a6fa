"""benchmarks/streaming.py: a small run against the local S3 server measures every
fastload variant and the raw GETs, and says for each peer why it has no figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastload.tools.s3server import swift_installed

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_a_small_run_measures_every_variant_or_says_why_not(tmp_path: Path):
    pytest.importorskip("boto3", reason="S3 needs boto3: pip install 'fastload[s3]'")
    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "streaming.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    rows = {
        row["name"]: row for row in json.loads((tmp_path / "streaming.json").read_text())["rows"]
    }
    measured = ["raw parallel GETs (4 at once)", "fastload, cold cache", "fastload, warm cache",
                "fastload, local disk"]  # fmt: skip
    assert all(rows[name]["per_second"] > 0 for name in measured)
    peers = [name for name in rows if name not in measured]
    assert peers == ["MosaicML Streaming", "litdata", "WebDataset", "Ray Data"]
    assert all(rows[name]["note"] for name in peers)
