"""An epoch's order over a shard set that depends on the seed, the epoch and the data set
only: never on the number of nodes, GPUs or workers."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

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
        prefetch: int = 8,
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
        self.prefetch = check_int(prefetch, "prefetch", low=0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_order(self, epoch: int | None = None) -> list[int]:
        """Every sample index of the epoch, in the order all ranks share."""
        epoch = self.epoch if epoch is None else epoch
        key = splitmix64(splitmix64(self.seed) ^ epoch) & (2**63 - 1)
        generator = torch.Generator().manual_seed(key)
        shards = torch.randperm(len(self.dataset.shards), generator=generator).tolist()
        order: list[int] = []
        for first in range(0, len(shards), self.window):
            indices = [
                index
                for shard in shards[first : first + self.window]
                for index in self.dataset.shard_range(shard)
            ]
            shuffled = torch.randperm(len(indices), generator=generator).tolist()
            order.extend(indices[i] for i in shuffled)
        return order

    def rank_order(self) -> list[int]:
        """This rank's sample indices of the epoch, in the order it reads them."""
        order = self.global_order()
        share = self.global_batch_size // self.world_size
        mine: list[int] = []
        for start in range(0, len(order) - self.global_batch_size + 1, self.global_batch_size):
            first = start + self.rank * share
            mine.extend(order[first : first + share])
        return mine

    def __iter__(self) -> Iterator[int]:
        mine = self.rank_order()
        if not (self.prefetch and self.dataset.remote):
            yield from mine
            return
        # The order is known here, in the loader's process: a thread brings the next
        # ``prefetch`` shards into the node's cache before the workers ask for them.
        prefetcher = ShardPrefetcher(self.dataset, [self.dataset.shard_of(i) for i in mine],
                                     ahead=self.prefetch)  # fmt: skip
        try:
            for position, index in enumerate(mine):
                prefetcher.reached(position)
                yield index
        finally:
            prefetcher.stop()

    def __len__(self) -> int:
        batches = len(self.dataset) // self.global_batch_size
        return batches * (self.global_batch_size // self.world_size)


class ShardPrefetcher:
    """Fetches the shards of a sequence of samples into the cache, in order of first use,
    at most ``ahead`` shards past the one the reader has reached, and keeps the cache's
    plan (the shards read now, then the next ones) up to date for its eviction."""

    def __init__(
        self, dataset: ShardedDataset, shards_of_samples: list[int], *, ahead: int
    ) -> None:
        self.dataset, self.ahead = dataset, ahead
        self.spans: dict[int, list[int]] = {}  # shard -> [first, last] position of use
        for position, shard in enumerate(shards_of_samples):
            self.spans.setdefault(shard, [position, position])[1] = position
        self.first_use = sorted(self.spans, key=lambda shard: self.spans[shard][0])
        self.starts = [self.spans[shard][0] for shard in self.first_use]
        self.position = 0
        self.condition = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(
            target=self._run, name="fastload-shard-prefetch", daemon=True
        )
        self.thread.start()

    def reached(self, position: int) -> None:
        with self.condition:
            self.position = position
            self.condition.notify()

    def stop(self) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify()
        self.thread.join()
        self.dataset.forget_plan()

    def plan(self) -> list[int]:
        """The shards still to be read: those being read now, then by first use."""
        position = self.position
        now = [s for s in self.first_use if self.spans[s][0] <= position <= self.spans[s][1]]
        later = [s for s in self.first_use if self.spans[s][0] > position]
        return now + later

    def _run(self) -> None:
        # up to ``ahead`` downloads at once: the readers of a window want all its shards
        with ThreadPoolExecutor(self.ahead, thread_name_prefix="fastload-shard-fetch") as pool:
            for number, shard in enumerate(self.first_use):
                with self.condition:
                    # shard ``number`` may be fetched once the reader is within ``ahead``
                    # shards of it
                    while not self.stopped and self._reached_shard() + self.ahead < number:
                        self.condition.wait()
                    if self.stopped:
                        return
                    plan = self.plan()
                self.dataset.plan(plan)
                pool.submit(self._fetch, shard, plan.index(shard) if shard in plan else 0)

    def _fetch(self, shard: int, use: int) -> None:
        try:
            self.dataset.fetch(shard, use)
        except Exception:  # the worker that reads it fetches it again and says why
            return

    def _reached_shard(self) -> int:
        """The number (in order of first use) of the shard the reader is in."""
        return max(0, bisect.bisect_right(self.starts, self.position) - 1)
