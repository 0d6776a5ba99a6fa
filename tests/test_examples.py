"""The examples are code users copy: they must run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_train_tensors_learns():
    out = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "train_tensors.py"),
            "--rows",
            "20000",
            "--epochs",
            "3",
            "--batch-size",
            "512",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "batched_fetch=True" in out
    accuracies = [
        float(line.split("accuracy ")[1].split(",")[0])
        for line in out.splitlines()
        if "accuracy" in line
    ]
    assert len(accuracies) == 3 and accuracies[-1] > 0.85
