"""An epoch's order over a shard set that depends on the seed, the epoch and the data set
only: never on the number of nodes, GPUs or workers."""

from __future__ import annotations

import heapq
import itertools
import warnings
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from fastload._checks import check_int
from fastload.seeds import splitmix64
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
    ``set_epoch`` each epoch, as for a ``DistributedSampler`` of your own (FastLoader
    advances only the one it makes itself).

    It only orders: it publishes its rank's order before the pass (:meth:`rank_order`),
    and a :class:`~fastload.FastLoader` hands that order to the dataset, whose
    download-ahead (``ShardedDataset(download_ahead=...)``) brings the next shards from
    object storage into the node's cache before the workers read them.

    ``window`` by default (:func:`default_window`): up to 64 shards from a folder, up to
    16 from object storage; a warning says when ``cache_limit`` cannot hold it and the
    dataset's download-ahead. A wider window mixes more shards into each batch (64 shards reach
    0.80 of a permutation's distinct shards per batch of 32; ``benchmarks/
    shuffle_quality.py``); every shard of it is open, or in the cache, at once.

    Several nodes: ``groups``. With one group, each node's slice of a global batch holds
    samples of every shard of the window, so every node downloads every shard: the whole
    data set per node and epoch. With ``groups=G``, each epoch deals the shuffled shards
    into ``G`` groups of about equal sample counts (each shard, in the shuffled order,
    to the group with the fewest samples so far). Each group is its own stream, read
    ``window`` of its shards at a time, the samples of each window shuffled. Global batch
    ``k`` is the ``k``-th ``global_batch_size // G`` samples of group 0's stream, then
    group 1's, and so on. Rank ``r`` of ``N`` ranks (``N`` a multiple of ``G``) reads
    only group ``r * G // N``'s shards, so with ``G`` = the number of nodes, each node
    downloads its own group's shards only: the data set about once in all.

    - Choose ``G`` = the number of nodes and keep it for the run, as MosaicML's
      ``num_canonical_nodes``: the global batches depend on ``(seed, epoch, data set,
      window, groups, global_batch_size)`` and never on the world size, so a run resumes
      on another number of GPUs with the same batches. On fewer nodes than groups, a node
      reads several groups, and needs their windows in its cache together.
    - A node's cache must hold ``window`` of its shards (``window`` x the shard size),
      and a few more for the download-ahead: a smaller cache downloads a shard again. A
      group's last window holds the shards left over: with one or two (66 shards a
      group, ``window=64``), every node's last few global batches read one or two.
    - Groups differ by up to a shard's samples, and the epoch has ``len(dataset) //
      global_batch_size`` global batches all the same. A group with more samples than
      its part of them lends the extra ones, from the end of its last shards (kept out
      of its own windows), to the groups with fewer, which read them, shuffled, in their
      part of the last global batches: a tail of at most ``G - 1`` shards' samples that
      reads across groups (a node downloads a few shards more). Only the final incomplete
      global batch's samples are left out, as with one group: from the ends of the
      longer groups' streams. ``groups=1`` is the order described first.
    - ``drop_last=True`` (the default, said in ``repr``) leaves the final incomplete
      global batch out (40 samples in global batches of 16: 32 read); with ``False`` it
      is filled up with the epoch's first samples, so every sample is read and a few
      twice, every rank a full share.

    Example:
        >>> import tempfile
        >>> from fastload.shards import ShardedDataset, write_shards
        >>> from fastload.testing.shapes import ShapesDetection
        >>> folder = tempfile.mkdtemp()
        >>> _ = write_shards(ShapesDetection(16, size=(16, 16)), folder, shard_size=1)
        >>> dataset = ShardedDataset(folder)  # 16 shards of one sample each
        >>> # 2 nodes of 4 GPUs: GPU 6 is on node 1, and reads group 1's shards only
        >>> sampler = ShardShuffle(dataset, global_batch_size=8, groups=2, rank=6,
        ...                        world_size=8)
        >>> mine = set(sampler.shard_groups()[1])
        >>> all(dataset.shard_of(index) in mine for index in sampler.rank_order())
        True
    """

    def __init__(
        self,
        dataset: ShardedDataset,
        *,
        global_batch_size: int,
        seed: int = 0,
        window: int | None = None,
        groups: int = 1,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = True,
    ) -> None:
        check_int(global_batch_size, "global_batch_size", low=1)
        check_int(groups, "groups", low=1)
        if window is None:
            window = default_window(dataset, groups)
        check_int(window, "window", low=1)
        _warn_if_the_cache_cannot_hold(dataset, window)
        if global_batch_size % groups:
            raise ValueError(
                f"global_batch_size {global_batch_size} is not a multiple of groups {groups}: "
                f"each global batch takes the same number of samples from every group"
            )
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
        self.seed, self.window, self.groups, self.epoch = seed, window, groups, 0
        self.drop_last = bool(drop_last)
        self._drawn: tuple[int, list[int]] | None = None  # (epoch, rank_order()) drawn last

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order_identity(self) -> dict[str, int | str]:
        """What the global batches depend on besides the epoch: a state saved under other
        values, or on another shard set (the same samples cut into other shards, say),
        would resume on other batches."""
        return {
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
            "window": self.window,
            "groups": self.groups,
            # an index upgraded to version 3 names the same set as before (its old digest)
            "shard_set": self.dataset.meta.get("upgraded_from", self.dataset.meta["shards_sha256"]),
            "drop_last": int(self.drop_last),
        }

    def shard_groups(self, epoch: int | None = None) -> list[list[int]]:
        """Each group's shards in the epoch, in the order the group reads them."""
        return self._deal(self._generator(epoch))

    def global_order(self, epoch: int | None = None) -> list[int]:
        """Every sample index of the epoch, in the order all ranks share: the global
        batches, then the samples of the final incomplete one."""
        generator = self._generator(epoch)
        groups = self._deal(generator)
        share = self.global_batch_size // self.groups
        batches = len(self.dataset) // self.global_batch_size
        need = batches * share  # each group's samples in the global batches
        sizes = [sum(len(self.dataset.shard_range(s)) for s in group) for group in groups]
        surplus = [max(size - need, 0) for size in sizes]
        # the final incomplete global batch: from the ends of the longer groups, last first
        left = len(self.dataset) - batches * self.global_batch_size
        dropped = [0] * self.groups
        for group in reversed(range(self.groups)):
            dropped[group] = min(surplus[group], left)
            left -= dropped[group]
        streams, lent = [], []
        for group, shards in enumerate(groups):
            lends = surplus[group] - dropped[group]
            stream, extra = self._window_shuffle(shards, sizes[group] - lends, generator)
            streams.append(stream)
            lent.extend(extra)
        taken = 0
        for stream in streams:  # the shorter groups read the longer ones' extra samples
            borrowed = lent[taken : taken + max(need - len(stream), 0)]
            taken += len(borrowed)
            if borrowed:
                shuffled = torch.randperm(len(borrowed), generator=generator).tolist()
                stream.extend(borrowed[i] for i in shuffled)
        order = [
            index
            for first in range(0, need, share)
            for stream in streams
            for index in stream[first : first + share]
        ]
        order.extend(index for stream in streams for index in stream[need:])
        return order

    def _generator(self, epoch: int | None) -> torch.Generator:
        epoch = self.epoch if epoch is None else epoch
        key = splitmix64(splitmix64(self.seed) ^ epoch) & (2**63 - 1)
        return torch.Generator().manual_seed(key)

    def _deal(self, generator: torch.Generator) -> list[list[int]]:
        """The shards in a random order (the generator's first draw), each dealt in turn
        to the group with the fewest samples so far (the first such group on a tie)."""
        shards = torch.randperm(len(self.dataset.shards), generator=generator).tolist()
        groups: list[list[int]] = [[] for _ in range(self.groups)]
        loads = [(0, group) for group in range(self.groups)]  # a heap of (samples, group)
        for shard in shards:
            samples, group = heapq.heappop(loads)
            groups[group].append(shard)
            heapq.heappush(loads, (samples + len(self.dataset.shard_range(shard)), group))
        return groups

    def _window_shuffle(
        self, shards: list[int], keep: int, generator: torch.Generator
    ) -> tuple[list[int], list[int]]:
        """The first ``keep`` samples of ``shards`` (in that order) read ``window`` shards
        at a time, the samples of each window shuffled; and the samples after them, in
        order (those a group lends)."""
        stream: list[int] = []
        rest: list[int] = []
        for first in range(0, len(shards), self.window):
            indices = [
                index
                for shard in shards[first : first + self.window]
                for index in self.dataset.shard_range(shard)
            ]
            mine = indices[: keep - len(stream)]
            rest.extend(indices[len(mine) :])
            if mine:
                shuffled = torch.randperm(len(mine), generator=generator).tolist()
                stream.extend(mine[i] for i in shuffled)
        return stream, rest

    def rank_order(self) -> list[int]:
        """This rank's sample indices of the epoch, in the order it reads them (drawn once
        for a pass: a loader reads it before the pass, the pass yields it). The final
        incomplete global batch is dropped (``drop_last``), or filled up with the epoch's
        first samples, as ``DistributedSampler`` pads, so that every rank reads a full
        share and every sample is read."""
        if self._drawn is not None and self._drawn[0] == self.epoch:
            return self._drawn[1]
        order = self.global_order()
        tail = len(order) % self.global_batch_size
        if tail and not self.drop_last:
            order = order + list(
                itertools.islice(itertools.cycle(order), self.global_batch_size - tail)
            )
        share = self.global_batch_size // self.world_size
        mine: list[int] = []
        for start in range(0, len(order) - self.global_batch_size + 1, self.global_batch_size):
            first = start + self.rank * share
            mine.extend(order[first : first + share])
        self._drawn = (self.epoch, mine)
        return mine

    def __iter__(self) -> Iterator[int]:
        order = self.rank_order()
        self._drawn = None  # held for the pass by its iterator, not by the sampler
        return iter(order)

    def __len__(self) -> int:
        batches, tail = divmod(len(self.dataset), self.global_batch_size)
        batches += int(bool(tail) and not self.drop_last)
        return batches * (self.global_batch_size // self.world_size)

    def __repr__(self) -> str:
        return (
            f"ShardShuffle(global_batch_size={self.global_batch_size}, seed={self.seed}, "
            f"window={self.window}, groups={self.groups}, rank={self.rank} of "
            f"{self.world_size}, drop_last={self.drop_last})"
        )


def default_window(dataset: ShardedDataset, groups: int) -> int:
    """``ShardShuffle``'s window when none is given: 64 shards from a folder (the files a
    process keeps open), 16 from object storage (the shards a node holds in its cache at
    once, and waits for before the first batch), no more than a group's shards. It
    depends on the data set only, never on a node's own settings (its cache limit):
    every rank must draw the same order."""
    per_group = max(1, -(-len(dataset.shards) // groups))
    return min(per_group, 16 if dataset.transport is not None else 64)


def _warn_if_the_cache_cannot_hold(dataset: ShardedDataset, window: int) -> None:
    limit = None if dataset.transport is None else dataset.transport.cache_limit
    if limit is None:
        return
    sizes = sorted(shard.size for shard in dataset.shards)
    ahead, ahead_bytes = dataset.download_depth, dataset.download_ahead_bytes
    if ahead_bytes is None:
        needed = sum(sizes[-(window + ahead) :])  # the largest shards, to be safe
        held = f"window {window} + download_ahead {ahead} shards"
    else:
        needed = sum(sizes[-window:]) + ahead_bytes
        held = f"window {window} shards + download_ahead_bytes {ahead_bytes}"
    if limit < needed:
        warnings.warn(
            f"cache_limit {limit} bytes holds fewer than {held} ({needed} bytes): shards "
            "will be downloaded more than once",
            stacklevel=3,
        )
