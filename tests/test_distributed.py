"""FastLoader under torch.distributed: two CPU processes on gloo, as torchrun would start."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler, TensorDataset

from fastload import FastLoader

SIZE, WORLD, EPOCHS = 21, 2, 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_rank(rank: int, port: int, out: str, manual_epochs: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(WORLD))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        loader = FastLoader(TensorDataset(torch.arange(SIZE)), batch_size=4, shuffle=True)
        assert isinstance(loader.sampler, DistributedSampler)
        assert loader.sampler.rank == rank and loader.sampler.shuffle
        seen = []
        for epoch in range(EPOCHS):
            if manual_epochs:
                loader.sampler.set_epoch(10 * epoch)
            seen.append([i for (batch,) in loader for i in batch.tolist()])
        Path(out, f"rank{rank}.json").write_text(
            json.dumps({"seen": seen, "epoch": loader.sampler.epoch, "repr": repr(loader)})
        )
    finally:
        dist.destroy_process_group()


def gather(tmp_path: Path, manual_epochs: bool) -> list[dict]:
    mp.spawn(run_rank, args=(free_port(), str(tmp_path), manual_epochs), nprocs=WORLD)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.slow
def test_ranks_get_disjoint_shards_and_a_new_order_each_epoch(tmp_path):
    ranks = gather(tmp_path, manual_epochs=False)
    for epoch in range(EPOCHS):
        shards = [set(rank["seen"][epoch]) for rank in ranks]
        # 21 samples over 2 ranks: DistributedSampler pads one rank with a repeat.
        assert all(len(rank["seen"][epoch]) == 11 for rank in ranks)
        assert shards[0] | shards[1] == set(range(SIZE))
        assert len(shards[0] & shards[1]) <= 1
    orders = [tuple(ranks[0]["seen"][epoch]) for epoch in range(EPOCHS)]
    assert len(set(orders)) == EPOCHS  # the epoch advanced by itself
    assert [rank["epoch"] for rank in ranks] == [EPOCHS - 1] * WORLD
    assert "sampler=DistributedSampler (rank 0 of 2)" in ranks[0]["repr"]
    assert "sampler=DistributedSampler (rank 1 of 2)" in ranks[1]["repr"]


@pytest.mark.slow
def test_a_user_who_calls_set_epoch_keeps_control(tmp_path):
    ranks = gather(tmp_path, manual_epochs=True)
    assert [rank["epoch"] for rank in ranks] == [10 * (EPOCHS - 1)] * WORLD
