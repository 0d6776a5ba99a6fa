"""Exact mid-epoch resume: where a loader is in its epoch.

A loader's order in an epoch is drawn by its sampler from a random generator when the
epoch starts. :class:`ResumableBatches` sits between DataLoader[Any] and the sampler: at each
epoch's start it snapshots the generators the sampler draws from (torch's global one,
the loader's and the sampler's own), and on a resume it puts the snapshot back for the
sampler's first draw, then skips the batches already trained on, without loading them.
:func:`loader_state` and :func:`resume_point` write and check the plain-data state.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from fastload.loader.contracts import BatchConsumer, GlobalBatchOrder

__all__ = [
    "EpochProgress",
    "RNGSnapshot",
    "ResumableBatches",
    "epoch_place",
    "key_epoch",
    "loader_identity",
    "loader_state",
    "order_generators",
    "resume_point",
    "samplers_with_epochs",
]

_END = object()


@dataclass
class RNGSnapshot:
    """The states of the generators a loader's order is drawn from, as bytes: torch's
    global generator and any ``torch.Generator`` of the loader and its samplers, taken
    when an epoch's ``iter()`` began. ``base_draw``: DataLoader[Any] then drew its workers'
    base seed before the order (a fresh iterator; persistent workers draw it once)."""

    states: dict[str, bytes]
    base_draw: bool

    @classmethod
    def take(cls, generators: dict[str, torch.Generator], *, base_draw: bool) -> RNGSnapshot:
        states = {"torch": torch.get_rng_state().numpy().tobytes()}
        for name, generator in generators.items():
            states[name] = generator.get_state().numpy().tobytes()
        return cls(states, base_draw)

    @contextlib.contextmanager
    def replayed(
        self, generators: dict[str, torch.Generator], base_generator: torch.Generator | None
    ) -> Iterator[None]:
        """The generators as they were at the snapshot, and DataLoader's base-seed draw
        made again if the epoch made one, for the block that draws the order. torch's
        global generator is put back after it: it belongs to the training loop. The
        others keep their draws, as in the run that was interrupted."""
        outside = torch.get_rng_state()
        try:  # whatever happens, the training loop's generator is its own again after
            torch.set_rng_state(_state(self.states["torch"]))
            for name, generator in generators.items():
                if name in self.states:
                    generator.set_state(_state(self.states[name]))
            if self.base_draw:
                torch.empty((), dtype=torch.int64).random_(generator=base_generator)
            yield
        finally:
            torch.set_rng_state(outside)


def _state(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@dataclass
class EpochProgress:
    """An epoch of a loader: its number (epochs started before it), the generators as
    they were at its start, and, when it is a resume, the batches to skip and the
    snapshot to draw its order from. Filled in when the epoch's ``iter()`` begins:
    ``key_epoch``, the epoch in the samples' keys (the sampler's, where it has one), and
    the generators the order is drawn from (``base`` draws the workers' base seed).
    ``yielded``: the batches the loader's iterator has handed out since; ``consumer``: what
    holds some of them in flight (a weak reference), which counts the ones trained on."""

    epoch: int
    snapshot: RNGSnapshot
    skip: int = 0
    replay: bool = False
    between: bool = False  # a resume at the start of ``epoch``, the one before done
    yielded: int = 0
    key_epoch: int = 0
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    base: torch.Generator | None = None
    consumer: weakref.ref[BatchConsumer] | None = None

    def trained(self) -> int | None:
        """The batches of this epoch its consumer has had; None without one."""
        consumer = None if self.consumer is None else self.consumer()
        return None if consumer is None else consumer.trained_batches()


class ResumableBatches:
    """The loader's batches of indices, one epoch per ``iter()``, able to start part-way.

    At an epoch's first batch (before the sampler draws) it reads ``progress``, which the
    loader sets at each ``iter()`` (it holds no reference to the loader: an iterator
    that outlives its loader still works, and none keeps it alive): on a resume it draws
    the order from the snapshot and skips the batches already trained on, unloaded.
    With ``keyed``, each index ``i`` becomes ``(epoch, i)`` for :class:`SeededSamples`.
    With ``track``, each batch's
    ``(epoch, indices)`` is queued on ``dispatched``, in order, for a consumer that seeds
    per-sample GPU randomness (DataPrefetcher pops them).
    """

    def __init__(self, inner: Any, *, keyed: bool) -> None:
        self.inner = inner
        self.progress: EpochProgress | None = None
        self.keyed = keyed
        self.track = False
        self.dispatched: collections.deque[tuple[int, list[int]]] = collections.deque()

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Any]:
        progress = self.progress
        if progress is None:
            raise RuntimeError("ResumableBatches: iterated before its loader began an epoch")
        epoch = progress.key_epoch
        self.dispatched.clear()
        place: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if progress.replay:
            place = progress.snapshot.replayed(progress.generators, progress.base)
        with place:  # a sampler draws its epoch's order at iter() or at its first batch
            batches = iter(self.inner)
            first = next(batches, _END)
        if first is _END:
            return
        for batch in itertools.islice(_then(first, batches), progress.skip, None):
            single = isinstance(batch, (int, np.integer))  # batch_size=None
            if self.track:
                self.dispatched.append((epoch, [int(batch)] if single else [int(i) for i in batch]))
            if self.keyed:
                batch = (epoch, int(batch)) if single else [(epoch, int(i)) for i in batch]
            yield batch


def _then(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """``first``, then what ``rest`` has left, never calling ``iter(rest)`` again: the
    iterator of a batch sampler may restart there (Lightning's ``_IndexBatchSamplerWrapper``
    is its own iterator and begins anew at each ``iter()``)."""
    yield first
    while (item := next(rest, _END)) is not _END:
        yield item


# 2: the batch sampler is checked; 3: no rank (any rank resumes from any rank's state),
# a DistributedSampler's seed, shuffle and drop_last, the sampler's epoch offset
STATE_FORMAT, STATE_VERSION = "fastload-loader", 3
READS = (2, 3)  # a version 2 state is still read: it held no more of its rank than 3


def order_generators(loader: DataLoader[Any]) -> dict[str, torch.Generator]:
    """The loader's and its samplers' own generators, each once: what its order is
    drawn from, beside torch's global generator."""
    found: dict[str, torch.Generator] = {}
    owners = (
        ("loader", loader),
        ("sampler", loader.sampler),
        ("batch_sampler", getattr(loader.batch_sampler, "sampler", None)),
    )
    for name, owner in owners:
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and all(
            generator is not other for other in found.values()
        ):
            found[name] = generator
    return found


def samplers_with_epochs(loader: DataLoader[Any]) -> dict[str, Any]:
    """The loader's samplers that count epochs (``epoch`` and ``set_epoch``)."""
    owners = (("sampler", loader.sampler), ("batch_sampler", loader.batch_sampler))
    return {
        name: owner
        for name, owner in owners
        if isinstance(getattr(owner, "epoch", None), int) and hasattr(owner, "set_epoch")
    }


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
        "dataset_length": len(loader.dataset),  # type: ignore[arg-type]
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


def epoch_place(
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
    if done < batches_per_epoch:
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


def key_epoch(loader: DataLoader[Any], epoch: int) -> int:
    """The epoch in a sample's key: its sampler's (``set_epoch``) where it has one, else
    the loader's ``epoch``."""
    for owner in samplers_with_epochs(loader).values():
        return int(owner.epoch)
    return epoch


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
            torch.Generator(devices[name]).set_state(_state(data))
        except RuntimeError as error:
            raise ValueError(f"FastLoader state: generator {name!r}: {error}") from None
    missing = sorted(set(generators) - set(saved))
    if missing:  # its draws would start afresh: another order, samples seen twice or never
        raise ValueError(f"FastLoader state: no state for the generator(s) {missing} this "
                         "loader draws its order from: saved by a loader built otherwise (a "
                         "seed= one before its order had a generator of its own)")  # fmt: skip
    return dict(saved)
