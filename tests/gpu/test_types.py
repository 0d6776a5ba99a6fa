"""fastload.gpu type-checks under ``mypy --strict`` (errors elsewhere, which mypy reaches
by following imports, are the package-wide check's: tests/test_types.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mypy_strict_finds_no_errors_in_fastload_gpu():
    pytest.importorskip("mypy")
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src/fastload/gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "source file" in completed.stdout, completed.stdout[-2000:] + completed.stderr[-2000:]
    in_gpu = [line for line in completed.stdout.splitlines() if line.startswith("src/fastload/gpu")]
    assert not in_gpu, "\n".join(in_gpu[:50])
