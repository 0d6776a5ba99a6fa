"""FastLoader under PyTorch Lightning, the real Trainer (CPU; one process, or two under
``strategy="ddp"`` over gloo, started by Lightning's own launcher): a DataPrefetcher or a
FastLoader returned by ``train_dataloader()`` trains on every sample once an epoch with
``seed``'s keyed draws, ``'auto'`` workers share the cores among the processes, a
mid-epoch checkpoint resumes every rank exactly, and a FastLoader Lightning re-creates
keeps its batches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

L = pytest.importorskip("lightning", reason="needs Lightning: pip install '.[lightning]'")

from fastload import FastLoader  # noqa: E402
from fastload.system import available_cpus  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("lightning_train.py")
sys.path.insert(0, str(SCRIPT.parent))

import drawn  # noqa: E402
import lightning_train  # noqa: E402
from drawn import Steps, by_sample  # noqa: E402


def fit(workdir: Path, feed: str, devices: int, *options: str) -> Steps:
    """One run of the script; every rank's log so far.

    Bounded: a rank that refuses a state leaves the other waiting in a collective. A run
    past its time prints every process's stacks (ranks and loader workers) into the
    failure. Under a loaded CI machine, one run in many of the two-process ones has
    stopped answering before rank 1's first batch (cause not found yet): such a run is
    warned of, with its stacks, and started once more from the same files.
    """
    workdir.mkdir(exist_ok=True)
    command = [sys.executable, str(SCRIPT), str(workdir), "--feed", feed,
               "--devices", str(devices), *options]  # fmt: skip
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    before = workdir.with_name(workdir.name + "-before")
    shutil.rmtree(before, ignore_errors=True)
    shutil.copytree(workdir, before)
    for attempt in (1, 2):
        done = run_or_stacks(command, environment, limit=180)
        if isinstance(done, subprocess.CompletedProcess):
            break
        stuck = f"{' '.join(command[1:])}: no end after 180 s; the stacks:\n{done[-12000:]}"
        if attempt == 2:
            raise AssertionError(stuck)
        warnings.warn(stuck, stacklevel=2)
        shutil.rmtree(workdir)
        shutil.copytree(before, workdir)  # the second run starts from the same files
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return logs(workdir, devices)


def run_or_stacks(
    command: list[str], environment: dict[str, str], limit: float
) -> subprocess.CompletedProcess[str] | str:
    """``command`` run in a session of its own; past ``limit`` s, every process of the
    session prints its stacks (SIGUSR1: the script registers faulthandler for it), the
    session is killed, and what it printed on stderr is returned."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=environment, cwd=SCRIPT.parent,
                               start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGUSR1)
        time.sleep(3)
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()[1]
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def logs(workdir: Path, devices: int) -> Steps:
    """Each rank's ``[epoch, batch index, indices, pixels]`` lines."""
    text = [(workdir / f"log-{rank}.jsonl").read_text() for rank in range(devices)]
    return {rank: [json.loads(line) for line in log.splitlines()] for rank, log in enumerate(text)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    root = tmp_path_factory.mktemp("lightning")
    runs = {}
    for feed in ("prefetcher", "loader"):
        for devices in (1, 2):
            runs[feed, devices] = root / f"{feed}-{devices}"
            fit(runs[feed, devices], feed, devices)
    return runs


def test_under_ddp_every_sample_once_an_epoch_with_the_seeds_draws(uninterrupted):
    for feed in ("prefetcher", "loader"):
        two, one = logs(uninterrupted[feed, 2], 2), logs(uninterrupted[feed, 1], 1)
        assert [len(lines) for lines in two.values()] == [5 * drawn.EPOCHS] * 2
        for epoch in range(drawn.EPOCHS):
            assert sorted(by_sample(two, epoch)) == list(range(40)), feed
            assert by_sample(two, epoch) == by_sample(one, epoch), feed  # keyed, flips too
    flipped = by_sample(logs(uninterrupted["prefetcher", 2], 2), 0)
    assert 0 < sum(pixels[0] == 0 for pixels in flipped.values()) < 40


def test_auto_workers_share_the_cores_among_lightnings_processes(uninterrupted):
    for devices in (1, 2):
        folder = uninterrupted["loader", devices]
        chosen = [int((folder / f"workers-{r}.txt").read_text()) for r in range(devices)]
        assert chosen == [max(1, min(available_cpus() // devices, 8))] * devices


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("feed", ["prefetcher", "loader"])
def test_a_mid_epoch_checkpoint_resumes_every_rank_exactly(uninterrupted, tmp_path, feed, devices):
    fit(tmp_path, feed, devices, "--save-at", "2")
    resumed = fit(tmp_path, feed, devices, "--resume")
    assert resumed == logs(uninterrupted[feed, devices], devices)  # 2 steps, then the rest


@pytest.mark.parametrize("devices", [1, 2])
def test_a_fastloader_over_tensors_made_before_the_trainer_survives_its_re_creation(
    tmp_path, devices
):
    steps = fit(tmp_path, "outside", devices)
    for epoch in range(drawn.EPOCHS):
        assert sorted(by_sample(steps, epoch)) == list(range(40))


def test_predict_re_creates_a_fastloader_over_tensors_with_its_batches(tmp_path):
    data = lightning_train.drawn_tensors()

    class Identity(L.LightningModule):
        def predict_step(self, batch, batch_index):
            return batch

    loader = FastLoader(data, batch_size=4)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        default_root_dir=tmp_path)  # fmt: skip
    predicted = trainer.predict(Identity(), dataloaders=loader)
    assert len(predicted) == 10
    for index, (images, labels) in enumerate(predicted):
        assert torch.equal(labels, torch.arange(4 * index, 4 * index + 4))
        assert torch.equal(images, data.tensors[0][4 * index : 4 * index + 4])
