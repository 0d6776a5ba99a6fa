"""benchmarks/train_harness.py, the end-to-end benchmarks' training script: each pipeline
(fastload's decodes, the torchvision baseline, DALI) trains, and it speaks to people."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from common_utils import run_script

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "train_harness.py"


@pytest.mark.parametrize(
    "variant",
    [
        [],
        ["--baseline"],
        ["--decode", "gpu", "--augment", "gpu"],
        ["--decode", "gpu-fused", "--dtype", "bfloat16"],
        ["--dali", "--dtype", "float16"],
    ],
)
def test_the_harness_runs_each_pipeline(tmp_path, variant):
    from fastload import make_image_folder

    if "--dali" in variant:
        pytest.importorskip(
            "nvidia.dali", reason="NVIDIA DALI, a peer: benchmarks/install_peers.sh"
        )
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=8, size=(64, 48))
    options = [
        *("--epochs", "2", "--batch-size", "4", "--image-size", "32"),
        *("--steps", "2", "--workers", "0", "--json"),
    ]
    out = run_script(HARNESS, str(root), *options, *variant)
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert all(
        e["images_per_second"] > 0 and e["loss"] is not None and 0 <= e["data_wait_fraction"] <= 1
        for e in epochs
    )
    expected = {"--baseline": "baseline", "--dali": "NVIDIA DALI"}.get(
        variant[0] if variant else ""
    )
    assert epochs[0]["pipeline"].startswith(expected or "fastload")


def test_the_harness_talks_to_people_without_warnings(tmp_path):
    from fastload import make_image_folder

    script = HARNESS
    help_text = run_script(script, "--help")
    assert "torchrun --nproc-per-node 8 benchmarks/train_harness.py train.lmdb" in help_text
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=4, size=(64, 48))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        out = run_script(script, str(root), "--epochs", "1", "--batch-size", "4", "--image-size",
                         "32", "--workers", "0", "--model", "squeezenet1_1")  # fmt: skip
    # With CUDA the harness augments on the GPU by default; it decodes on the CPU.
    where = (
        "cpu decode, gpu augmentation\\) on cuda:0"
        if torch.cuda.is_available()
        else ("cpu decode, cpu augmentation\\) on cpu")
    )
    assert re.fullmatch(
        r"epoch 0: [\d,]+ images/s, data wait [\d.]+%, [\d.]+ CPU ms/image, loss [\d.]+ "
        rf"\(fastload \({where}\)\n",
        out,
    ), out
