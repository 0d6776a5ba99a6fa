"""The loader's state as plain data: its format and version, what ``state_dict()``
writes (where the loader is in its epoch, and what it must be resumed with), and the
checks that read a state back into the epoch to resume (:func:`resume_point`).
Replaying that epoch is :mod:`fastload.loader.resume`'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from fastload.loader.contracts import GlobalBatchOrder
from fastload.loader.resume import (
    EpochProgress,
    RNGSnapshot,
    generator_state,
    order_generators,
    samplers_with_epochs,
)
from fastload.typed_torch import length

__all__ = [
    "READS",
    "STATE_FORMAT",
    "STATE_VERSION",
    "current_state",
    "loader_identity",
    "loader_state",
    "resume_point",
]

# 2: the batch sampler is checked; 3: no rank (any rank resumes from any rank's state),
# a DistributedSampler's seed, shuffle and drop_last, the sampler's epoch offset
STATE_FORMAT, STATE_VERSION = "fastload-loader", 3
READS = (2, 3)  # a version 2 state is still read: it held no more of its rank than 3


def loader_identity(loader: DataLoader[Any]) -> dict[str, Any]:
    """What a state must have been saved with to resume on ``loader``.

    Nothing of one rank: under a ``DistributedSampler`` every rank has handed out as many
    batches as the others, and its order follows from the sampler's seed, epoch and the
    world size, so the state rank 0 saves resumes every rank (Lightning and Accelerate
    save rank 0's and load it everywhere)."""
    batch_size = loader.batch_size
    if batch_size is None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    sampler = loader.sampler
    identity = {
        "dataset_length": length(loader.dataset),
        "batch_size": batch_size,
        "batches_per_epoch": len(loader),
        "seed": getattr(loader, "seed", None),
        "sampler": type(sampler).__name__,
        "batch_sampler": (
            None if loader.batch_sampler is None else type(loader.batch_sampler).__name__
        ),
        "world_size": getattr(sampler, "num_replicas", 1),
        # a DistributedSampler's order: its seed, whether it shuffles, whether it drops
        **{
            f"sampler_{name}": getattr(sampler, name)
            for name in ("seed", "shuffle", "drop_last")
            if hasattr(sampler, "num_replicas") and isinstance(getattr(sampler, name, None), int)
        },
    }
    if isinstance(sampler, GlobalBatchOrder):
        # Its global batches do not depend on the world size: a rank's batches handed
        # out are the global batches done, whatever the number of ranks that resumes.
        identity.update(batch_size=sampler.global_batch_size, world_size="any",
                        order=sampler.order_identity())  # fmt: skip
    return identity


def current_state(
    loader: DataLoader[Any],
    progress: EpochProgress | None,
    resume: EpochProgress | None,
    *,
    epochs_started: int,
    sampler_offset: int | None,
    fresh_iterator: bool,
) -> dict[str, Any]:
    """What ``loader.state_dict()`` returns: where the loader is, inside an epoch or
    between two (the next one then drawn from the generators as they are now).

    Args:
        progress: The epoch under way, or the last begun.
        resume: A state loaded and not begun yet: it is where the loader is.
        epochs_started: The epochs begun before (the next epoch's number).
        sampler_offset: The sampler's epoch less the loader's, where the loader drives it.
        fresh_iterator: The next ``iter()`` makes a new DataLoader iterator, which draws
            the workers' base seed before the order.
    """
    epoch, done, snapshot = _epoch_place(
        resume or progress,
        pending=resume is not None,
        batches=None if progress is None else progress.trained(),
        epochs_started=epochs_started,
        batches_per_epoch=len(loader),
    )
    if resume is not None and resume.between:  # loaded, not begun: as it was saved
        return loader_state(
            loader, resume.epoch, 0, resume.snapshot, between=True, sampler_offset=sampler_offset
        )
    if snapshot is not None:
        return loader_state(
            loader, epoch, done, snapshot, between=False, sampler_offset=sampler_offset
        )
    snapshot = RNGSnapshot.take(order_generators(loader), base_draw=fresh_iterator)
    return loader_state(loader, epoch, 0, snapshot, between=True, sampler_offset=sampler_offset)


def _epoch_place(
    progress: EpochProgress | None,
    *,
    pending: bool,
    batches: int | None,
    epochs_started: int,
    batches_per_epoch: int,
) -> tuple[int, int, RNGSnapshot | None]:
    """Where a loader is: ``(epoch, batches done, the epoch's snapshot)`` inside an epoch,
    or ``(the next epoch, 0, None)`` between two.

    Args:
        progress: The epoch under way or last begun, or a resume not yet begun (``pending``).
        batches: The batches the training loop has had, if not all that were handed out.
    """
    if progress is None:
        return epochs_started, 0, None
    done = progress.skip
    if not pending:
        done += progress.yielded if batches is None else batches
    # the loader's iterator ended and the training loop has had all it handed out
    over = progress.finished and (batches is None or batches >= progress.yielded)
    if done < batches_per_epoch and not over:
        return progress.epoch, done, progress.snapshot
    return progress.epoch + 1, 0, None


def loader_state(
    loader: DataLoader[Any],
    epoch: int,
    done: int,
    snapshot: RNGSnapshot,
    *,
    between: bool,
    sampler_offset: int | None = None,
) -> dict[str, Any]:
    """The plain data ``FastLoader.state_dict()`` returns: ``done`` batches of ``epoch``
    handed out (``between``: that epoch is over, the next starts from ``snapshot``).
    ``sampler_offset``: where the loader drives its sampler's epoch, the sampler's epoch
    less the loader's (a state whose two disagree is refused)."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "epoch": epoch,
        "batches": done,
        "between_epochs": between,
        "generators": dict(snapshot.states),
        "base_draw": snapshot.base_draw,
        "sampler_epochs": {
            name: int(owner.epoch) for name, owner in samplers_with_epochs(loader).items()
        },
        "sampler_offset": sampler_offset,
        **loader_identity(loader),
    }


def resume_point(
    state: Any, identity: dict[str, Any], generators: dict[str, torch.Generator]
) -> EpochProgress:
    """The epoch a loader with ``identity`` and ``generators`` resumes from ``state``.

    Raises:
        ValueError: Not a FastLoader state, another version, or one saved by a loader that
            differs (the message says what differs), or values that are not counts and
            generator states.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ValueError("not a FastLoader state: give what FastLoader.state_dict() returned")
    version = state.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in READS:
        raise ValueError(
            f"FastLoader state version {state.get('version')!r}; this fastload reads "
            f"{' and '.join(map(str, READS))}"
        )
    differences = [
        f"{key} {state.get(key)!r} in the state, {value!r} here"
        for key, value in identity.items()
        if not _same(_saved(state, key, value), value)
        # version 2 did not record a DistributedSampler's settings
        and not (state["version"] == 2 and key.startswith("sampler_") and key not in state)
    ]
    if differences:
        raise ValueError(
            "cannot resume: the state was saved by a different loader: " + "; ".join(differences)
        )
    for key in ("base_draw", "between_epochs"):
        if not isinstance(state.get(key), bool):
            raise ValueError(f"FastLoader state: {key} {state.get(key)!r} is not True or False")
    sampler_epochs = state.get("sampler_epochs")
    if not isinstance(sampler_epochs, dict) or not all(
        isinstance(name, str) and _is_count(value) for name, value in sampler_epochs.items()
    ):
        raise ValueError(f"FastLoader state: sampler_epochs {sampler_epochs!r} is not epochs")
    snapshot = RNGSnapshot(_checked_generators(state, generators), state["base_draw"])
    epoch, done = _count(state, "epoch"), _count(state, "batches")
    _check_sampler_epoch(state, epoch, sampler_epochs)
    if done > 0 and state["between_epochs"]:
        raise ValueError(
            f"FastLoader state: between_epochs with batches {done}: a state between two "
            "epochs has trained none of the next"
        )
    if done > 0 and done >= identity["batches_per_epoch"]:
        raise ValueError(
            f"FastLoader state: batches {done} is not within an epoch of "
            f"{identity['batches_per_epoch']} batches"
        )
    return EpochProgress(epoch, snapshot, skip=done, replay=True, between=state["between_epochs"])


def _same(saved: Any, here: Any) -> bool:
    """Equal and of one type: a world size of 2.0 is not a count saved by a loader."""
    return bool(saved == here) and type(saved) is type(here)


def _saved(state: dict[str, Any], key: str, here: Any) -> Any:
    """The state's ``key``; a version 2 ``order`` (ShardShuffle's) recorded neither the
    shard set nor ``drop_last`` (it always dropped): those are taken as this loader's."""
    saved = state.get(key)
    old_order = state["version"] == 2 and key == "order"
    if old_order and isinstance(saved, dict) and isinstance(here, dict) and here.get("drop_last"):
        return {**saved, **{k: here[k] for k in ("shard_set", "drop_last") if k in here}}
    return saved


def _check_sampler_epoch(state: dict[str, Any], epoch: int, sampler_epochs: dict[str, int]) -> None:
    """Where the loader drives its sampler's epoch (``sampler_offset``), the sampler's
    epoch in the state follows from the loader's: one that does not was altered."""
    offset = state.get("sampler_offset")
    if offset is None or "sampler" not in sampler_epochs:
        return
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise ValueError(f"FastLoader state: sampler_offset {offset!r} is not an integer")
    expected = epoch + offset - (1 if state["between_epochs"] else 0)
    if sampler_epochs["sampler"] != expected:
        raise ValueError(
            f"FastLoader state: sampler_epochs {sampler_epochs!r} disagree with epoch {epoch}: "
            f"the loader drives its sampler's epoch, which would be {expected}"
        )


_MOST = 2**63 - 1  # a generator's seed plus an epoch must fit its 64 bits


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MOST


def _count(state: dict[str, Any], key: str) -> int:
    value = state.get(key)
    if not isinstance(value, int) or not _is_count(value):
        raise ValueError(f"FastLoader state: {key} {value!r} is not a count")
    return value


def _checked_generators(
    state: dict[str, Any], generators: dict[str, torch.Generator]
) -> dict[str, bytes]:
    saved = state.get("generators")
    if not isinstance(saved, dict) or not isinstance(saved.get("torch"), bytes):
        raise ValueError("FastLoader state: no generator states")
    devices = {"torch": torch.device("cpu")} | {n: g.device for n, g in generators.items()}
    sizes = {"torch": torch.get_rng_state().numel()}
    sizes |= {name: g.get_state().numel() for name, g in generators.items()}
    for name, data in saved.items():
        if name not in sizes or not isinstance(data, bytes) or len(data) != sizes[name]:
            raise ValueError(
                f"FastLoader state: generator {name!r} does not match this loader's "
                f"({sorted(sizes)})"
            )
        try:  # on a generator of its own: a bad state must not reach one in use
            torch.Generator(devices[name]).set_state(generator_state(data))
        except RuntimeError as error:
            raise ValueError(f"FastLoader state: generator {name!r}: {error}") from None
    missing = sorted(set(generators) - set(saved))
    if missing:  # its draws would start afresh: another order, samples seen twice or never
        raise ValueError(f"FastLoader state: no state for the generator(s) {missing} this "
                         "loader draws its order from: saved by a loader built otherwise (a "
                         "seed= one before its order had a generator of its own)")  # fmt: skip
    return dict(saved)
