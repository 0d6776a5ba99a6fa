"""FastLoader under Hugging Face Accelerate, the real one (torchrun, gloo, CPU, 1 and 2
processes): ``accelerator.prepare`` hands the FastLoader back, so an epoch sees every
sample once across the processes with ``seed``'s keyed draws (but for the samples
DistributedSampler pads an epoch with, which ``gather_for_metrics`` drops); ``save_state``
mid-epoch and ``load_state`` resume every rank exactly, from the loader itself or through
a DataPrefetcher on ``accelerator.device``, whether the loader is registered for
checkpointing or left to Accelerate's own (``use_stateful_dataloader``). In this
process: what ``GradientState`` sees of a FastLoader's epoch, and which part of the last
gathered step :func:`last_step_samples` keeps."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from itertools import chain
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

pytest.importorskip(
    "accelerate", reason="needs Hugging Face Accelerate: pip install '.[accelerate]'"
)

from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.state import AcceleratorState, GradientState

from fastload import DataPrefetcher, FastLoader
from fastload.loader.accelerate_state import last_step_samples

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


@pytest.fixture
def accelerator():
    """An Accelerator in this process (one, on the CPU), its shared state reset after."""
    made = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True)
    )
    yield made
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def ten(**options) -> FastLoader:
    return FastLoader(TensorDataset(torch.arange(10)), batch_size=4, shuffle=True, seed=7,
                      **options)  # fmt: skip


@pytest.mark.parametrize("feed", ["loader", "prefetcher"])
@pytest.mark.parametrize("resumed", [False, True])
def test_gradient_state_sees_a_fastloaders_epoch_end_at_its_last_batch(accelerator, feed, resumed):
    loader = accelerator.prepare(ten())
    if resumed:
        first = iter(loader)
        next(first)
        loader.load_state_dict(loader.state_dict())
    batches = loader if feed == "loader" else DataPrefetcher(loader, "cpu", dtype=None)
    for _epoch in range(2):
        ends = []
        for (indices,) in batches:
            state = accelerator.gradient_state
            ends.append((state.end_of_dataloader, state.remainder))
            assert accelerator.gather_for_metrics(indices).tolist() == indices.tolist()
        expected = [(False, 0)] * (1 if resumed and _epoch == 0 else 2) + [(True, 0)]
        assert ends == expected
        assert not accelerator.gradient_state.in_dataloader


def test_an_epoch_left_part_way_leaves_the_gradient_state(accelerator):
    loader = accelerator.prepare(ten())
    for _ in loader:
        break
    assert accelerator.gradient_state.in_dataloader
    assert [accelerator.gradient_state.end_of_dataloader for _ in loader] == [False, False, True]
    assert not accelerator.gradient_state.in_dataloader


@pytest.mark.parametrize("feed", ["loader", "prefetcher"])
def test_accelerates_own_save_state_keeps_a_prepared_fastloaders_place(accelerator, tmp_path, feed):
    """``use_stateful_dataloader=True``, nothing registered: the loader's place is saved."""
    loader = accelerator.prepare(ten(num_workers=0))
    batches = loader if feed == "loader" else DataPrefetcher(loader, "cpu", dtype=None)
    epoch = iter(batches)
    next(epoch)
    accelerator.save_state(str(tmp_path))
    rest = [indices.tolist() for (indices,) in epoch]
    assert [indices.tolist() for (indices,) in batches] != rest  # the next epoch
    accelerator.load_state(str(tmp_path))
    assert [indices.tolist() for (indices,) in batches] == rest


@given(
    samples=st.integers(1, 60), ranks=st.integers(1, 5), batch=st.integers(1, 6),
    drop_last=st.booleans(),
)  # fmt: skip
def test_last_step_samples_keeps_exactly_the_real_samples_of_the_last_gathered_step(
    samples, ranks, batch, drop_last
):
    """Each rank's batches as DistributedSampler (padding) shards them; the last step
    gathered rank after rank, as ``gather_for_metrics`` does, then cut as Accelerate cuts
    it: every sample once, or -1 where no prefix can be right."""
    data = TensorDataset(torch.arange(samples))
    loaders = [
        DataLoader(data, batch_size=batch, drop_last=drop_last,
                   sampler=DistributedSampler(data, ranks, rank, shuffle=False))
        for rank in range(ranks)
    ]  # fmt: skip
    steps = [[b.tolist() for (b,) in loader] for loader in loaders]
    gathered = [list(chain.from_iterable(rank[step] for rank in steps))
                for step in range(len(steps[0]))]  # fmt: skip
    before = collections.Counter(chain.from_iterable(gathered[:-1]))
    last = gathered[-1] if gathered else []
    once = collections.Counter(range(samples))
    keep = last_step_samples(loaders[0])
    if keep == -1:  # the padding is gathered, and no prefix drops it
        assert all(before + collections.Counter(last[:n]) != once for n in range(len(last) + 1))
    else:
        seen = before + collections.Counter(last[:keep] if keep else last)
        assert max(seen.values(), default=1) == 1
        if not drop_last:
            assert seen == once


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Steps]:
    root = tmp_path_factory.mktemp("accelerate")
    return {
        (feed, processes): train(root / f"{feed}-{processes}", processes, feed)
        for feed in ("prepare", "prefetcher")
        for processes in (1, 2)
    }


@pytest.mark.slow
def test_prepare_gives_every_sample_once_an_epoch_across_two_processes(uninterrupted):
    steps = uninterrupted["prepare", 2]
    assert [len(lines) for lines in steps.values()] == [10, 10]  # 40 samples, 2 x 4 a step
    for epoch in (0, 1):
        assert sorted(by_sample(steps, epoch)) == list(range(drawn.SAMPLES))


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("feed", ["prepare", "prefetcher"])
def test_save_state_mid_epoch_then_load_state_resumes_every_rank_exactly(
    uninterrupted, tmp_path, feed, processes
):
    train(tmp_path, processes, feed, "--save-at", "2")
    resumed = train(tmp_path, processes, feed, "--resume")
    assert resumed == uninterrupted[feed, processes]  # each rank: 2 steps, then the rest


@pytest.mark.slow
@pytest.mark.parametrize("feed", ["prepare", "prefetcher"])
def test_accelerates_own_checkpointing_resumes_a_prepared_fastloader_on_two_processes(
    uninterrupted, tmp_path, feed
):
    """``use_stateful_dataloader=True`` and nothing registered but the epoch counter:
    ``save_state`` keeps each rank's place (through a prefetcher, the batch trained next)."""
    train(tmp_path, 2, feed, "--save-at", "2", "--register", "none")
    resumed = train(tmp_path, 2, feed, "--resume", "--register", "none")
    assert resumed == uninterrupted[feed, 2]


@pytest.mark.slow
def test_gather_for_metrics_drops_the_sample_distributed_sampler_pads_an_epoch_with(tmp_path):
    """101 samples on 2 ranks: one sample read twice (DistributedSampler's padding), and
    ``gather_for_metrics`` over the epoch gives each of the 101 once."""
    workdir = tmp_path / "evaluate"
    workdir.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id",
               "evaluate", "--max-restarts", "0", str(SCRIPT), str(workdir), "--feed",
               "prepare", "--evaluate"]  # fmt: skip
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    ranks = [json.loads((workdir / f"evaluate-{rank}.json").read_text()) for rank in (0, 1)]
    for feed in ("prepare", "prefetcher"):
        read = collections.Counter(ranks[0][feed]["read"] + ranks[1][feed]["read"])
        assert sorted(read) == list(range(101))
        assert sorted(read.values()) == [1] * 100 + [2]  # the padding
        for rank in ranks:
            assert sorted(rank[feed]["gathered"]) == list(range(101))


@pytest.mark.slow
@pytest.mark.parametrize("register", ["loader", "both"])
def test_a_prefetchers_loader_registered_for_checkpointing_resumes_at_the_batch_trained_next(
    uninterrupted, tmp_path, register
):
    """The loader behind a DataPrefetcher counts the batches trained on, not the ones the
    prefetcher holds in flight: saved from the loader (or from both), no batch is skipped."""
    train(tmp_path, 1, "prefetcher", "--save-at", "2", "--register", register)
    resumed = train(tmp_path, 1, "prefetcher", "--resume", "--register", register)
    assert resumed == uninterrupted["prefetcher", 1]
