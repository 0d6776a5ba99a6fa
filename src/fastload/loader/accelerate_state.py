"""Where an epoch ends, told to Hugging Face Accelerate's ``GradientState``.

Accelerate's own loaders register with ``GradientState`` for each epoch and raise
``end_of_dataloader`` as they hand out the last batch: ``gather_for_metrics`` then drops
the padded duplicates of the last step (it keeps the first ``remainder`` items), and
``accumulate`` syncs the gradients of a last, short accumulation. A FastLoader is handed
back by ``accelerator.prepare`` as it is, so whoever hands its batches to the training
loop (the loader's iterator, or a DataPrefetcher over it) does the same with an
:class:`EpochEnd`. Nothing here imports Accelerate: without an ``Accelerator`` made in
the process, there is nothing to tell.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from fastload.typed_torch import length

__all__ = ["EpochEnd", "PreparedByItself", "epoch_end", "last_step_samples"]


class PreparedByItself:
    """What Accelerate reads on a loader given to ``prepare`` and ``save_state``."""

    # Accelerate's prepare() would re-create it as a DataLoader of its own over a second
    # shard of the batches (1/world_size of an epoch, the seed and state lost); one that
    # reads as prepared is handed back as it is: FastLoader shards and resumes by itself.
    _is_accelerate_prepared = True

    @property
    def use_stateful_dataloader(self) -> bool:
        """Accelerate's ``save_state``/``load_state`` keep the place of a prepared loader
        that says so: True but over an IterableDataset (never ``skip_first_batches`` it)."""
        return self.__dict__.get("_resumable") is not None  # FastLoader's resumable batches


class EpochEnd:
    """An epoch under way, as ``GradientState`` reads a loader: ``end_of_dataloader``,
    whether the batch in hand is the epoch's last, and ``remainder`` (see
    :func:`last_step_samples`). Registered while the epoch lasts; ``GradientState``
    holds it by a weak reference, its owner by a strong one."""

    def __init__(self, gradient_state: Any, remainder: int) -> None:
        self.end_of_dataloader = False
        self.remainder = remainder
        self._state: Any = gradient_state
        gradient_state._add_dataloader(self)

    def close(self) -> None:
        """The epoch is over (or left): ``GradientState`` no longer sees it."""
        if self._state is not None:
            self._state._remove_dataloader(self)
            self._state = None


def epoch_end(loader: DataLoader[Any]) -> EpochEnd | None:
    """A registered :class:`EpochEnd` for an epoch of ``loader`` beginning, or None where
    no ``Accelerator`` was made in this process."""
    module = sys.modules.get("accelerate.state")
    if module is None or module.GradientState._shared_state == {}:  # not yet initialised
        return None
    return EpochEnd(module.GradientState(), last_step_samples(loader))


def last_step_samples(loader: DataLoader[Any]) -> int:
    """What ``gather_for_metrics`` keeps of the epoch's last step, gathered over the
    ranks (each rank's last batch, rank after rank): 0 to keep all of it (no sample was
    added), the number of samples that are not ``DistributedSampler``'s padding, or -1
    where that cannot be a prefix or is not known (Accelerate then keeps all of it and
    says so).

    ``DistributedSampler`` pads an epoch with its first samples up to a multiple of the
    world size; the padding is the last sample of the last ranks, so a prefix drops it
    only when one sample was added or the last batches hold one sample each.
    """
    sampler = loader.sampler
    if not isinstance(sampler, DistributedSampler):
        ranks = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        return 0 if ranks == 1 else -1
    padding = sampler.total_size - length(sampler.dataset)
    if padding <= 0:
        return 0
    batch, per_rank = loader.batch_size, sampler.num_samples
    if batch is None:  # a batch sampler of the user's: its last batch is not known
        return -1
    if loader.drop_last:
        if per_rank % batch:
            return 0  # the padding is in the short last batch, dropped
        last = batch
    else:
        last = per_rank - batch * (math.ceil(per_rank / batch) - 1)
    if padding > 1 and last > 1:
        return -1
    return sampler.num_replicas * last - padding
