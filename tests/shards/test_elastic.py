"""Exact resume under elasticity: a torchrun run (gloo, CPU) on a shard set killed with
SIGKILL and resumed on 4, then 2, then 3, then 1 processes trains every later step on the
same samples with the same augmentation, and ends with the weights of the run that was
never interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from fastload import make_image_folder
from fastload.shards import write_shards

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("elastic_train.py")


def torchrun(processes: int, shards: Path, workdir: Path, run: str, kill_at: int | None = None):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
               str(processes), "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
               "--rdzv-id", run, "--max-restarts", "0", "--monitor-interval", "0.5",
               str(SCRIPT), str(shards), str(workdir)]  # fmt: skip
    if kill_at is not None:
        command += ["--kill-at", str(kill_at)]
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)


def steps(workdir: Path) -> dict[int, set[tuple[int, str]]]:
    """Step -> the (sample index, augmented image's hash) pairs all ranks trained on."""
    trained: dict[int, set[tuple[int, str]]] = defaultdict(set)
    for log in workdir.glob("log-*.jsonl"):
        for line in log.read_text().splitlines():
            step, index, digest = json.loads(line)
            assert (index, digest) not in trained[step], f"step {step} trained {index} twice"
            trained[step].add((index, digest))
    return dict(trained)


def test_a_killed_run_resumed_on_4_2_3_1_processes_equals_the_uninterrupted_one(tmp_path):
    folder = make_image_folder(tmp_path / "images", num_classes=3, images_per_class=24,
                               size=(40, 30))  # fmt: skip
    write_shards(folder, tmp_path / "shards", shard_size=40_000)
    whole = tmp_path / "whole"
    whole.mkdir()
    finished = torchrun(2, tmp_path / "shards", whole, "whole")
    assert finished.returncode == 0, finished.stderr[-3000:]
    reference = steps(whole)
    assert sorted(reference) == list(range(1, 13))  # 72 samples / 12 a step, 2 epochs
    assert all(len(pairs) == 12 for pairs in reference.values())

    elastic = tmp_path / "elastic"
    elastic.mkdir()
    shm = Path("/dev/shm")
    before = set(os.listdir(shm)) if shm.is_dir() else None
    for processes, kill_at in [(4, 3), (2, 6), (3, 8)]:
        killed = torchrun(processes, tmp_path / "shards", elastic, f"n{processes}", kill_at)
        assert killed.returncode != 0, killed.stderr[-3000:]
        assert torch.load(elastic / "checkpoint.pt", weights_only=True)["step"] == kill_at
        assert not (elastic / "final.pt").exists()
        if before is not None:  # a killed worker's shared memory is gone with it
            left = [name for name in set(os.listdir(shm)) - before if "torch" in name]
            assert not left, left
    finished = torchrun(1, tmp_path / "shards", elastic, "n1")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert steps(elastic) == reference  # every step: the same samples, the same augmentation
    final = torch.load(elastic / "final.pt", weights_only=True)
    expected = torch.load(whole / "final.pt", weights_only=True)
    for name, value in expected.items():  # all-reduce sums in another order: not bit-exact
        torch.testing.assert_close(final[name], value, rtol=1e-10, atol=1e-12)
