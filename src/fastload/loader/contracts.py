"""What a loader offers the stages after it, and what it reads from its sampler and
dataset, as Protocols: DataPrefetcher checks a loader against these, and FastLoader its
sampler and dataset, not for attributes one by one.

The download-ahead: a sampler that publishes its pass's order before the pass
(:class:`PublishesOrder`) and a dataset that fetches ahead (:class:`FetchesAhead`): the
loader hands the one's order to the other at each pass, then says how far it has handed
the order out to its workers. The sampler only orders; the dataset only fetches.

The keyed-seed hand-off: ``FastLoader(seed=...)`` seeds each sample's CPU augmentation
from ``(seed, epoch, index)``. A consumer that augments on the GPU calls
``keep_batch_seeds()`` once; from then on the loader queues each batch's per-sample seeds
in the order it hands batches out, and the consumer takes them, one ``pop_batch_seeds()``
per batch it takes from the loader, and draws that batch's GPU parameters inside
``fastload.gpu.sample_seeds(seeds)``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "BatchConsumer",
    "FetchesAhead",
    "FetchingAhead",
    "GlobalBatchOrder",
    "HandsOutRuns",
    "KeyedSeedSource",
    "PublishesOrder",
    "ResumableLoader",
]


@runtime_checkable
class KeyedSeedSource(Protocol):
    """A loader whose batches carry per-sample seeds (``seed`` set: an int)."""

    seed: int | None

    def keep_batch_seeds(self) -> None:
        """From now on, queue each batch's per-sample seeds as the batch is handed out."""

    def pop_batch_seeds(self) -> np.ndarray | None:
        """The oldest queued batch's seeds (int64), or None without a ``seed``."""


@runtime_checkable
class HandsOutRuns(Protocol):
    """A loader's iterator that hands out super-batches one batch at a time (FastLoader's,
    with ``super_batches``): right after each ``next()``, ``handed_run`` is the
    ``fastload.loader.superbatch.RunPart`` that batch was cut from (None where it was
    collated alone). A consumer may copy the run once and cut the copy, as DataPrefetcher
    does."""

    handed_run: Any


@runtime_checkable
class BatchConsumer(Protocol):
    """What takes a loader's batches and holds some in flight (DataPrefetcher): it says how
    many of the epoch it drives the training loop has had."""

    def trained_batches(self) -> int:
        """The batches of the loader's epoch under way handed to the training loop."""

    def release(self) -> bool:
        """The loader begins an epoch for someone else, or loads a state: stop reading
        an epoch begun ahead of the training loop. Whether there was one."""


@runtime_checkable
class ResumableLoader(Protocol):
    """A loader that saves and restores its place in an epoch.

    A consumer that holds batches in flight calls ``count_batches_by(consumer)`` right
    after each ``iter()`` of the loader: its ``state_dict()`` then counts, for that epoch,
    the batches the consumer says were trained on, not the ones it handed out, whoever
    saves it (a framework may checkpoint the loader, the consumer, or both)."""

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: the batches of its epoch trained on."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``'s state at the next ``iter()``."""

    def count_batches_by(self, consumer: BatchConsumer) -> None:
        """The epoch begun by the last ``iter()`` counts ``consumer``'s trained batches."""


@runtime_checkable
class GlobalBatchOrder(Protocol):
    """A sampler whose epoch is a sequence of global batches of ``global_batch_size``,
    the same for any world size, each rank taking its slice of every one
    (:class:`fastload.shards.ShardShuffle`). A rank's batches handed out are then the
    global batches done, and a state resumes on another world size."""

    global_batch_size: int

    def global_order(self, epoch: int | None = None) -> list[int]:
        """Every sample index of the epoch, in the order all ranks share."""

    def order_identity(self) -> dict[str, int | str]:
        """What its global batches depend on besides the data set (seed, window, ...):
        a state is refused by a loader whose sampler says otherwise."""


@runtime_checkable
class PublishesOrder(Protocol):
    """A sampler that says its pass's indices before the pass, in the order it yields
    them (:class:`fastload.shards.ShardShuffle`: this rank's)."""

    def rank_order(self) -> list[int]:
        """The indices of the coming pass, in order."""


class FetchingAhead(Protocol):
    """A dataset's fetch ahead of its reader, under way."""

    def reached(self, position: int) -> None:
        """The reader has been handed the order up to ``position``."""

    def stop(self) -> None:
        """The reader reads no more of the order."""


@runtime_checkable
class FetchesAhead(Protocol):
    """A dataset whose samples come from elsewhere and can be fetched ahead of the
    workers that read them (:class:`fastload.shards.ShardedDataset` in object storage)."""

    def fetch_ahead(self, order: list[int]) -> FetchingAhead | None:
        """Start fetching the samples of ``order`` (indices, in the order they will be
        read), its first ones claimed before this returns; None: nothing to fetch."""
