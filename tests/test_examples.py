"""The examples are code users copy: they must run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("variant", [[], ["--baseline"], ["--decode", "gpu", "--augment", "gpu"]])
def test_train_classifier_runs_each_pipeline(tmp_path, variant):
    from fastload import make_image_folder

    root = make_image_folder(tmp_path, num_classes=2, images_per_class=8, size=(64, 48))
    options = [
        *("--epochs", "2", "--batch-size", "4", "--image-size", "32"),
        *("--steps", "2", "--workers", "0", "--json"),
    ]
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_classifier.py"), str(root), *options, *variant],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    ).stdout
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert all(
        e["images_per_second"] > 0 and e["loss"] is not None and 0 <= e["data_wait_fraction"] <= 1
        for e in epochs
    )
    assert epochs[0]["pipeline"].startswith("baseline" if variant == ["--baseline"] else "fastload")
