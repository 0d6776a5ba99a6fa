"""A training run on a shard set under torchrun (gloo, CPU) that checkpoints after every
step, for tests/shards/test_elastic.py: killed with SIGKILL at a step, it is resumed on
another number of processes.

Each rank appends, after each optimizer step, one JSON line per sample it trained on:
``[step, sample index, SHA-256 of the augmented image]``. Rank 0 writes the final
weights to ``final.pt``.

Usage: torchrun --nproc-per-node N elastic_train.py SHARDS WORKDIR [--kill-at STEP]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchvision.transforms import v2

from fastload import FastLoader
from fastload.shards import ShardedDataset, ShardShuffle

GLOBAL_BATCH, EPOCHS = 12, 2


class Indexed(torch.utils.data.Dataset):
    """The samples with their index, to log what each step trained on."""

    def __init__(self, dataset: ShardedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        image, label = self.dataset[index]
        return image, label, index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shards", type=Path)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--kill-at", type=int)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    augment = v2.Compose([v2.RandomResizedCrop(16, antialias=True), v2.RandomHorizontalFlip(),
                          v2.ToDtype(torch.float64, scale=True)])  # fmt: skip
    dataset = ShardedDataset(args.shards, decode="tensor", transform=augment)
    sampler = ShardShuffle(dataset, global_batch_size=GLOBAL_BATCH, seed=5, window=2)
    loader = FastLoader(Indexed(dataset), batch_size=GLOBAL_BATCH // world, sampler=sampler,
                        seed=9, num_workers=1)  # fmt: skip
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(3 * 16 * 16, 3).double())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    checkpoint_path, step, first_epoch = args.workdir / "checkpoint.pt", 0, 0
    if checkpoint_path.exists():
        checkpoint = torch.load(checkpoint_path, weights_only=True)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        loader.load_state_dict(checkpoint["loader"])
        step, first_epoch = checkpoint["step"], checkpoint["loader"]["epoch"]
    run = os.environ["TORCHELASTIC_RUN_ID"]
    log = open(args.workdir / f"log-{run}-{rank}.jsonl", "a")  # noqa: SIM115
    for _epoch in range(first_epoch, EPOCHS):
        for images, labels, indices in loader:
            loss = nn.functional.cross_entropy(model(images.flatten(1)), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # after the all-reduce: a step is logged once all ranks made it
            step += 1
            for image, index in zip(images, indices.tolist(), strict=True):
                digest = hashlib.sha256(image.numpy().tobytes()).hexdigest()
                log.write(json.dumps([step, index, digest]) + "\n")
            log.flush()
            if rank == 0:
                checkpoint = {"model": model.module.state_dict(),
                              "optimizer": optimizer.state_dict(),
                              "loader": loader.state_dict(), "step": step}  # fmt: skip
                torch.save(checkpoint, args.workdir / "checkpoint.tmp")
                os.replace(args.workdir / "checkpoint.tmp", checkpoint_path)
            dist.barrier()
            if step == args.kill_at and rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        torch.save(model.module.state_dict(), args.workdir / "final.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
