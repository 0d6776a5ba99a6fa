"""timm's samplers for distributed runs: repeated augmentation (each sample ``k`` times
an epoch, the repeats on different ranks) and evaluation's ordered split."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from fastload._checks import check_int

__all__ = ["OrderedDistributedSampler", "RepeatAugSampler"]


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "distributed=True needs torch.distributed initialised (or num_replicas and rank)"
            )
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
    return check_int(num_replicas, "num_replicas", low=1), check_int(rank, "rank", low=0)


class RepeatAugSampler(Sampler[int]):
    """timm's (DeiT's) repeated-augmentation sampler: the epoch's order (from
    ``seed + epoch``) with each index repeated ``num_repeats`` times, dealt to the ranks
    in turn, so that a sample's repeats land on different ranks; each rank takes
    ``len(dataset) // 256 * 256 / num_replicas`` of them, as timm does.

    Example:
        >>> sampler = RepeatAugSampler(range(512), num_replicas=2, rank=0, num_repeats=3)
        >>> len(sampler), len(set(sampler))
        (256, 171)
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        num_repeats: int = 3,
        selected_round: int = 256,
        seed: int = 0,
    ) -> None:
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.dataset, self.shuffle, self.seed, self.epoch = dataset, shuffle, seed, 0
        self.num_repeats = check_int(num_repeats, "num_repeats", low=1)
        size = len(dataset)
        self.num_samples = math.ceil(size * self.num_repeats / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        if selected_round and size >= selected_round:
            selected = size // selected_round * selected_round // self.num_replicas
        else:
            selected = math.ceil(size / self.num_replicas)
        self.num_selected_samples = min(selected, self.num_samples)

    def __iter__(self) -> Iterator[int]:
        size = len(self.dataset)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(size, generator=generator) if self.shuffle else torch.arange(size)
        repeated = torch.repeat_interleave(order, self.num_repeats).tolist()
        mine = range(self.rank, self.total_size, self.num_replicas)[: self.num_selected_samples]
        return iter([repeated[i % len(repeated)] for i in mine])

    def __len__(self) -> int:
        return self.num_selected_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class OrderedDistributedSampler(Sampler[int]):
    """Evaluation's split, as timm's: rank ``r`` takes indices ``r, r + R, ...``, the
    last ones wrapped round so every rank has as many.

    Example:
        >>> list(OrderedDistributedSampler(range(5), num_replicas=2, rank=1))
        [1, 3, 0]
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None):
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.dataset = dataset
        self.num_samples = math.ceil(len(dataset) / self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        size, total = len(self.dataset), self.num_samples * self.num_replicas
        return iter([i % size for i in range(self.rank, total, self.num_replicas)])

    def __len__(self) -> int:
        return self.num_samples
