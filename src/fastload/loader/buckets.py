"""BucketBatchSampler: batches of images with similar aspect ratios, so that padding a
batch to its largest image (``fastload.collate.padded_collate``) wastes little."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from fastload._checks import check_int

__all__ = ["BucketBatchSampler"]


class BucketBatchSampler(Sampler[list[int]]):
    """Shuffled batches whose images all fall in one aspect-ratio bucket.

    Every index comes exactly once an epoch; a bucket's last, incomplete batch is yielded
    too (``drop_last=False``) rather than topped up with repeated samples. Pass it as
    ``batch_sampler=``; call ``set_epoch`` for a new order each epoch under several
    processes, as with ``DistributedSampler``.

    Args:
        sizes: Per sample, ``(height, width)`` (read from the headers, or stored).
        batch_size: Images per batch.
        buckets: Aspect-ratio buckets, log-spaced from 1:2 to 2:1 (wider or taller
            images join the outermost ones).
        shuffle: Shuffle indices (seeded by ``seed`` and the epoch) before bucketing.
        drop_last: Drop each bucket's incomplete last batch.

    Example:
        >>> sampler = BucketBatchSampler([(10, 20), (20, 10), (11, 20), (20, 11)], 2)
        >>> sorted(sorted(batch) for batch in sampler)
        [[0, 2], [1, 3]]
    """

    def __init__(
        self,
        sizes: Sequence[tuple[int, int]],
        batch_size: int,
        *,
        buckets: int = 8,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        check_int(batch_size, "batch_size", low=1)
        check_int(buckets, "buckets", low=1)
        heights_widths = torch.as_tensor(sizes, dtype=torch.float64)
        if heights_widths.numel() == 0:
            heights_widths = heights_widths.reshape(0, 2)
        if heights_widths.dim() != 2 or heights_widths.shape[1] != 2:
            raise ValueError(
                "sizes must hold one (height, width) pair per sample, got an array of shape "
                f"{tuple(heights_widths.shape)}"
            )
        if (heights_widths <= 0).any():
            first = int((heights_widths <= 0).any(dim=1).nonzero()[0])
            raise ValueError(f"sizes must be positive (height, width); sample {first} is "
                             f"{tuple(sizes[first])}")  # fmt: skip
        log_ratio = torch.log2(heights_widths[:, 1] / heights_widths[:, 0]).clamp(-1, 1)
        position = ((log_ratio + 1) / 2 * buckets).long().clamp(max=buckets - 1)
        self.bucket_of = position
        self.batch_size, self.buckets = batch_size, buckets
        self.shuffle, self.drop_last, self.seed, self.epoch = shuffle, drop_last, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.arange(len(self.bucket_of))
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = order[torch.randperm(len(order), generator=generator)]
        waiting: list[list[int]] = [[] for _ in range(self.buckets)]
        for index in order.tolist():
            bucket = waiting[int(self.bucket_of[index])]
            bucket.append(index)
            if len(bucket) == self.batch_size:
                yield bucket.copy()
                bucket.clear()
        if not self.drop_last:
            yield from (bucket for bucket in waiting if bucket)

    def __len__(self) -> int:
        counts = torch.bincount(self.bucket_of, minlength=self.buckets).tolist()
        whole = math.floor if self.drop_last else math.ceil
        return sum(whole(count / self.batch_size) for count in counts)
