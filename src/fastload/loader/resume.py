"""Exact mid-epoch resume at run time: replaying an epoch where a loader left it.

A loader's order in an epoch is drawn by its sampler from a random generator when the
epoch starts. :class:`ResumableBatches` sits between DataLoader and the sampler: at each
epoch's start it snapshots the generators the sampler draws from (torch's global one,
the loader's and the sampler's own), and on a resume it puts the snapshot back for the
sampler's first draw, then skips the batches already trained on, without loading them.
The plain-data state that carries an epoch's place is :mod:`fastload.loader.state`'s.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from fastload.loader.accelerate_state import EpochEnd, epoch_end
from fastload.loader.contracts import BatchConsumer, FetchesAhead, PublishesOrder
from fastload.seeds import SampleKey

__all__ = [
    "EpochProgress",
    "RNGSnapshot",
    "ResumableBatches",
    "begin_epoch",
    "generator_state",
    "key_epoch",
    "order_generators",
    "restore_sampler_epochs",
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
            torch.set_rng_state(generator_state(self.states["torch"]))
            for name, generator in generators.items():
                if name in self.states:
                    generator.set_state(generator_state(self.states[name]))
            if self.base_draw:
                torch.empty((), dtype=torch.int64).random_(generator=base_generator)
            yield
        finally:
            torch.set_rng_state(outside)


def generator_state(data: bytes) -> torch.Tensor:
    """A generator's state saved as bytes, as the tensor ``set_state`` takes."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@dataclass
class EpochProgress:
    """An epoch of a loader: its number (epochs started before it), the generators as
    they were at its start, and, when it is a resume, the batches to skip and the
    snapshot to draw its order from. Filled in when the epoch's ``iter()`` begins:
    ``key_epoch``, the epoch in the samples' keys (the sampler's, where it has one), and
    the generators the order is drawn from (``base`` draws the workers' base seed).
    ``yielded``: the batches the loader's iterator has handed out since; ``consumer``: what
    holds some of them in flight (a weak reference), which counts the ones trained on;
    ``end``: the epoch as Accelerate's ``GradientState`` sees it, while the loader's
    iterator hands its batches to the training loop (no consumer); ``finished``: the
    loader's iterator reached the epoch's end."""

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
    end: EpochEnd | None = None
    finished: bool = False  # the loader's iterator reached the epoch's end

    def counted(self, yielded: int, length: int | None) -> None:
        """The loader's iterator has handed out ``yielded`` batches of ``length`` (None:
        unknown): the last one raises Accelerate's ``end_of_dataloader``."""
        self.yielded = yielded
        if self.end is not None and length is not None and self.skip + yielded >= length:
            self.end.end_of_dataloader = True

    def ended(self) -> None:
        """The loader's iterator reached the epoch's end (whatever the sampler's ``len``)."""
        self.finished = True
        self.close()

    def close(self) -> None:
        """The loader's iterator is done with this epoch (ended, left, or handed to a
        consumer, which tells Accelerate itself)."""
        if self.end is not None:
            self.end.close()
            self.end = None

    def trained(self) -> int | None:
        """The batches of this epoch its consumer has had; None without one."""
        consumer = None if self.consumer is None else self.consumer()
        return None if consumer is None else consumer.trained_batches()


def begin_epoch(
    loader: DataLoader[Any], resume: EpochProgress | None, *, epoch: int, fresh_iterator: bool
) -> EpochProgress:
    """The epoch an ``iter()`` of ``loader`` begins: ``resume`` (a state loaded), or else
    ``epoch`` from the generators as they are now (``fresh_iterator``: a new DataLoader
    iterator, which draws the workers' base seed first), filled in with what its order is
    drawn from and the epoch its samples are keyed with, registered with Accelerate's
    ``GradientState`` where an ``Accelerator`` was made."""
    progress = resume
    if progress is None:
        snapshot = RNGSnapshot.take(order_generators(loader), base_draw=fresh_iterator)
        progress = EpochProgress(epoch, snapshot)
    progress.key_epoch = key_epoch(loader, progress.epoch)
    progress.generators = order_generators(loader)
    progress.base = loader.generator
    progress.end = epoch_end(loader)
    return progress


class ResumableBatches:
    """The loader's batches of indices, one epoch per ``iter()``, able to start part-way.

    At an epoch's first batch (before the sampler draws) it reads ``progress``, which the
    loader sets at each ``iter()`` (it holds no reference to the loader: an iterator
    that outlives its loader still works, and none keeps it alive): on a resume it draws
    the order from the snapshot and skips the batches already trained on, unloaded.
    With ``keyed``, each index ``i`` becomes ``(epoch, i)`` for :class:`SeededSamples`.
    With ``track``, each batch's
    ``(epoch, indices)`` is queued on ``dispatched``, in order, for a consumer that seeds
    per-sample GPU randomness (DataPrefetcher pops them). With ``ahead`` (a sampler that
    publishes its order, and a dataset that fetches ahead), the pass's order (less the
    batches skipped) goes to the dataset before the first batch, and each batch handed out
    tells it how far the workers have been given the order. Unless ``fresh`` (``inner`` is
    torch's ``BatchSampler`` or FastLoader's own, which make a new batch each time), each
    batch is copied as it is drawn: a batch sampler may refill and yield one list, or
    yield generators, and the batch is read later (in a group, in a worker).
    """

    def __init__(
        self,
        inner: Any,
        *,
        keyed: bool,
        ahead: tuple[PublishesOrder, FetchesAhead] | None,
        fresh: bool = False,
        batched: bool = True,
    ) -> None:
        self.inner = inner
        self.fresh = fresh
        self.batched = batched
        self.progress: EpochProgress | None = None
        self.keyed = keyed
        self.ahead = ahead
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
            ahead = self.ahead
            order = None if ahead is None else ahead[0].rank_order()
            batches = iter(self.inner)
            first = next(batches, _END)
        if first is _END:
            return
        stream = _then(first, batches)
        count = _count if self.batched else lambda _: 1
        skipped = sum(map(count, itertools.islice(stream, progress.skip)))
        fetching = (
            ahead[1].fetch_ahead(order[skipped:])
            if ahead is not None and order is not None
            else None
        )
        handed = -1  # the position in the order of the last index handed out
        try:
            for drawn in stream:
                batch = drawn if self.fresh or not self.batched else _owned(drawn)
                if fetching is not None:
                    handed += count(batch)
                    fetching.reached(handed)
                if self.track or self.keyed:
                    keys = _keys(epoch, batch if self.batched else [batch])
                    if self.track:
                        self.dispatched.append((epoch, [key.sample_index for key in keys]))
                    if self.keyed:
                        batch = keys if self.batched else keys[0]
                yield batch
        finally:
            if fetching is not None:
                fetching.stop()

    def failed(self) -> None:
        """The oldest batch not yet handed out failed to load: its seeds, queued for a
        consumer that only takes the batches that loaded, are dropped."""
        if self.track and self.dispatched:
            self.dispatched.popleft()


def _owned(batch: Any) -> Any:
    """A batch of indices as drawn, in an object of its own where the sampler might change
    or consume it before it is read: a list or tensor copied, a generator (any iterator)
    as a list; anything else (a tuple, a batch object of the dataset's own) as it is."""
    if isinstance(batch, list):
        return list(batch)
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, Iterator):
        return list(batch)
    return batch


def _count(batch: Any) -> int:
    """The indices in a batch."""
    return len(batch) if hasattr(batch, "__len__") else sum(1 for _ in batch)


def _keys(epoch: int, indices: Any) -> list[SampleKey]:
    """The keys of a batch's samples in ``epoch``.

    Raises:
        TypeError: An index is not an integer: ``seed=`` keys samples by their index.
    """
    keys = []
    for index in indices:
        try:
            keys.append(SampleKey(epoch, operator.index(index)))
        except TypeError:
            raise TypeError(
                f"seed= keys each sample by its integer index; the sampler gave {index!r} "
                "(a dataset indexed otherwise is loaded without seed=)"
            ) from None
    return keys


def _then(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """``first``, then what ``rest`` has left, never calling ``iter(rest)`` again: the
    iterator of a batch sampler may restart there (Lightning's ``_IndexBatchSamplerWrapper``
    is its own iterator and begins anew at each ``iter()``)."""
    yield first
    while (item := next(rest, _END)) is not _END:
        yield item


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


def restore_sampler_epochs(loader: DataLoader[Any], epochs: dict[str, int]) -> None:
    """Each of the loader's samplers that counts epochs back at its epoch in ``epochs``
    (a state's ``sampler_epochs``)."""
    samplers = samplers_with_epochs(loader)
    for name, value in epochs.items():
        if name in samplers:
            samplers[name].set_epoch(value)


def key_epoch(loader: DataLoader[Any], epoch: int) -> int:
    """The epoch in a sample's key: its sampler's (``set_epoch``) where it has one, else
    the loader's ``epoch``."""
    for owner in samplers_with_epochs(loader).values():
        return int(owner.epoch)
    return epoch
