"""The whole package type-checks clean under ``mypy --strict``, with the configuration in
pyproject.toml (``make lint``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_finds_no_errors():
    pytest.importorskip("mypy")
    completed = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stdout[-4000:]
