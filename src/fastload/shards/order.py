"""An epoch's order over a shard set that depends on the seed, the epoch and the data set
only: never on the number of nodes, GPUs or workers."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from fastload._checks import check_int
from fastload.hashing import splitmix64
from fastload.shards.dataset import ShardedDataset

__all__ = ["ShardShuffle"]


class ShardShuffle(Sampler[int]):
    """Shards in a random order, read ``window`` at a time, the samples of each window
    in a random order; cut into global batches of ``global_batch_size``, of which each
    rank takes its contiguous slice. The global batches are the same for any world size,
    so a run resumed on another number of GPUs goes on with the same sequence; each rank
    reads from ``window`` shards at a time. ``window=len(dataset.shards)`` is a full
    permutation.

    Pass it as ``sampler=`` with ``batch_size=global_batch_size // world_size``; call
    ``set_epoch`` each epoch (FastLoader does, as for ``DistributedSampler``).

    Example:
        >>> # world size 2: rank 0 and rank 1 read the halves of each global batch of 8
        >>> # ShardShuffle(dataset, global_batch_size=8, rank=0, world_size=2)
    """

    def __init__(
        self,
        dataset: ShardedDataset,
        *,
        global_batch_size: int,
        seed: int = 0,
        window: int = 8,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        check_int(global_batch_size, "global_batch_size", low=1)
        check_int(window, "window", low=1)
        initialised = dist.is_available() and dist.is_initialized()
        self.world_size = (
            world_size if world_size is not None else (dist.get_world_size() if initialised else 1)
        )
        self.rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        if global_batch_size % self.world_size:
            raise ValueError(
                f"global_batch_size {global_batch_size} is not a multiple of the world size "
                f"{self.world_size}"
            )
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside a world of {self.world_size}")
        self.dataset, self.global_batch_size = dataset, global_batch_size
        self.seed, self.window, self.epoch = seed, window, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_order(self, epoch: int | None = None) -> list[int]:
        """Every sample index of the epoch, in the order all ranks share."""
        epoch = self.epoch if epoch is None else epoch
        key = splitmix64(splitmix64(self.seed) ^ epoch) & (2**63 - 1)
        generator = torch.Generator().manual_seed(key)
        starts = self.dataset._starts
        shards = torch.randperm(len(self.dataset.shards), generator=generator).tolist()
        order: list[int] = []
        for first in range(0, len(shards), self.window):
            indices = [
                index
                for shard in shards[first : first + self.window]
                for index in range(starts[shard], starts[shard + 1])
            ]
            shuffled = torch.randperm(len(indices), generator=generator).tolist()
            order.extend(indices[i] for i in shuffled)
        return order

    def __iter__(self) -> Iterator[int]:
        order = self.global_order()
        share = self.global_batch_size // self.world_size
        for start in range(0, len(order) - self.global_batch_size + 1, self.global_batch_size):
            first = start + self.rank * share
            yield from order[first : first + share]

    def __len__(self) -> int:
        batches = len(self.dataset) // self.global_batch_size
        return batches * (self.global_batch_size // self.world_size)
