"""FastLoader under Hugging Face Accelerate, the real one (torchrun, gloo, CPU, 1 and 2
processes): ``accelerator.prepare`` hands the FastLoader back, so an epoch sees every
sample once across the processes with ``seed``'s keyed draws; ``save_state`` mid-epoch
and ``load_state`` resume every rank exactly, from the loader itself or through a
DataPrefetcher on ``accelerator.device``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "accelerate", reason="needs Hugging Face Accelerate: pip install '.[accelerate]'"
)

from fastload import FastLoader

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("accelerate_train.py")
sys.path.insert(0, str(SCRIPT.parent))

import drawn  # noqa: E402
from drawn import Steps, by_sample  # noqa: E402


def train(workdir: Path, processes: int, feed: str, *options: str) -> Steps:
    """One torchrun of the script; every rank's log so far."""
    workdir.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
               str(processes), "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
               "--rdzv-id", workdir.name, "--max-restarts", "0", str(SCRIPT), str(workdir),
               "--feed", feed, *options]  # fmt: skip
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return {
        rank: [
            json.loads(line) for line in (workdir / f"log-{rank}.jsonl").read_text().splitlines()
        ]
        for rank in range(processes)
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Steps]:
    root = tmp_path_factory.mktemp("accelerate")
    return {
        (feed, processes): train(root / f"{feed}-{processes}", processes, feed)
        for feed in ("prepare", "prefetcher")
        for processes in (1, 2)
    }


def test_prepare_gives_every_sample_once_an_epoch_across_two_processes(uninterrupted):
    steps = uninterrupted["prepare", 2]
    assert [len(lines) for lines in steps.values()] == [10, 10]  # 40 samples, 2 x 4 a step
    for epoch in (0, 1):
        assert sorted(by_sample(steps, epoch)) == list(range(drawn.SAMPLES))


def test_prepare_keeps_the_seeds_keyed_draws_on_any_number_of_processes(uninterrupted):
    loader = FastLoader(drawn.Drawn(), batch_size=4, shuffle=True, seed=7)
    for epoch in (0, 1):
        alone = {int(i): image[0, 0, [0, -1]].tolist() for images, labels in loader
                 for i, image in zip(labels, images, strict=True)}  # fmt: skip
        for processes in (1, 2):
            assert by_sample(uninterrupted["prepare", processes], epoch) == alone
        flipped = by_sample(uninterrupted["prefetcher", 2], epoch)
        assert {i: sorted(p) for i, p in flipped.items()} == {
            i: sorted(p) for i, p in alone.items()
        }
        assert flipped == by_sample(uninterrupted["prefetcher", 1], epoch)  # the same flips
        assert 0 < sum(p[0] == 0 for p in flipped.values()) < len(flipped)  # some flipped


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("feed", ["prepare", "prefetcher"])
def test_save_state_mid_epoch_then_load_state_resumes_every_rank_exactly(
    uninterrupted, tmp_path, feed, processes
):
    train(tmp_path, processes, feed, "--save-at", "2")
    resumed = train(tmp_path, processes, feed, "--resume")
    assert resumed == uninterrupted[feed, processes]  # each rank: 2 steps, then the rest


@pytest.mark.parametrize("register", ["loader", "both"])
def test_a_prefetchers_loader_registered_for_checkpointing_resumes_at_the_batch_trained_next(
    uninterrupted, tmp_path, register
):
    """The loader behind a DataPrefetcher counts the batches trained on, not the ones the
    prefetcher holds in flight: saved from the loader (or from both), no batch is skipped."""
    train(tmp_path, 1, "prefetcher", "--save-at", "2", "--register", register)
    resumed = train(tmp_path, 1, "prefetcher", "--resume", "--register", register)
    assert resumed == uninterrupted["prefetcher", 1]
