"""The examples are code users copy: they must run."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from common_utils import run_script

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_train_tensors_learns():
    out = run_script(
        EXAMPLES / "train_tensors.py", "--rows", "20000", "--epochs", "3", "--batch-size", "512"
    )
    assert "batched_fetch=True" in out
    accuracies = [
        float(line.split("accuracy ")[1].split(",")[0])
        for line in out.splitlines()
        if "accuracy" in line
    ]
    assert len(accuracies) == 3 and accuracies[-1] > 0.85


@pytest.mark.slow
def test_train_classifier_trains_on_a_folder_of_jpegs_without_warnings(tmp_path):
    from fastload import make_image_folder

    root = make_image_folder(tmp_path, num_classes=2, images_per_class=8, size=(64, 48))
    script = EXAMPLES / "train_classifier.py"
    assert "FastLoader's workers decode" in run_script(script, "--help")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        options = ["--epochs", "2", "--batch-size", "4", "--image-size", "32", "--workers", "2"]
        out = run_script(script, str(root), *options, "--model", "squeezenet1_1")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the same code without a GPU
    assert re.fullmatch(rf"(epoch [01]: loss [\d.]+, [\d,]+ images/s on {device}\n){{2}}", out), out


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["generated", "lmdb"])
def test_train_detector_runs_an_epoch_on_synthetic_shapes(storage, tmp_path):
    lmdb = ["--lmdb", str(tmp_path / "shapes.lmdb")] if storage == "lmdb" else []
    out = run_script(EXAMPLES / "train_detector.py", "--images", "8", "--batch-size", "4",
                     "--workers", "2", "--json", *lmdb)  # fmt: skip
    assert (tmp_path / "shapes.lmdb").is_file() == (storage == "lmdb")
    (metrics,) = [json.loads(line) for line in out.splitlines()]
    assert metrics["epoch"] == 0 and metrics["images_per_second"] > 0
    assert 0 < metrics["loss"] < 100  # the detector's summed losses, finite
