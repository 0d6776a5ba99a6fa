"""Exact mid-epoch resume: where a loader is in its epoch, and randomness keyed by sample.

A loader's order in an epoch is drawn by its sampler from a random generator when the
epoch starts. :class:`ResumableBatches` sits between DataLoader and the sampler: at each
epoch's start it snapshots the generators the sampler draws from (torch's global one,
the loader's and the sampler's own), and on a resume it puts the snapshot back for the
sampler's first draw, then skips the batches already trained on, without loading them.

With a ``seed``, each sample's augmentation draws come from generators seeded by
``(seed, epoch, index)`` (:class:`SeededSamples`, in whichever process loads it), so a
sample's randomness does not depend on the worker, the worker count or the world size.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from fastload.hashing import GOLDEN, splitmix64
from fastload.loader.errors import note_failure
from fastload.loader.proxy import DatasetProxy

__all__ = [
    "EpochProgress",
    "RNGSnapshot",
    "ResumableBatches",
    "SeededSamples",
    "keyed_seeds",
    "sample_seed",
]

_END = object()


@functools.lru_cache(maxsize=16)
def _epoch_keys(seed: int, epoch: int) -> tuple[int, int]:
    first, second = np.random.SeedSequence([seed, epoch]).generate_state(2, np.uint64)
    return int(first), int(second)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The 63-bit seed of sample ``index`` in ``epoch``: a function of the three alone
    (splitmix64 of the index, keyed by the ``(seed, epoch)`` pair)."""
    add, xor = _epoch_keys(seed, epoch)
    return (splitmix64(index * GOLDEN + add) ^ xor) >> 1


def keyed_seeds(seed: int, epoch: int, indices: Sequence[int]) -> np.ndarray:
    """:func:`sample_seed` of each index, as an int64 array.

    Example:
        >>> int(keyed_seeds(1234, 0, [5, 6])[1]) == sample_seed(1234, 0, 6)
        True
    """
    return np.array([sample_seed(seed, epoch, int(index)) for index in indices], np.int64)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32))  # all 63 bits
    torch.default_generator.manual_seed(seed)  # the CPU generator only: CUDA's is the loop's


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's global generators as they were, after the block."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


class SeededSamples(DatasetProxy):
    """What FastLoader hands to DataLoader when it has a ``seed``: it loads a key
    ``(epoch, index)`` with Python's, NumPy's and torch's generators seeded from
    ``(seed, epoch, index)``, so that the sample's augmentation draws are its own.

    In the main process (``num_workers=0``) the training loop's generators are put back
    after each batch. A plain index loads the sample unseeded. Other attributes are the
    wrapped dataset's.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        super().__init__(dataset)
        self.seed = seed

    def _load(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        epoch, index = key
        _seed_everything(sample_seed(self.seed, epoch, index))
        try:
            return self.dataset[index]
        except Exception as error:  # named here: the fetch sees only the batch
            note_failure(error, self.dataset, index)
            raise

    def __getitem__(self, key: Any) -> Any:
        if get_worker_info() is not None:
            return self._load(key)
        with _rng_kept():
            return self._load(key)

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        if get_worker_info() is not None:
            return [self._load(key) for key in keys]
        with _rng_kept():
            return [self._load(key) for key in keys]

    def __repr__(self) -> str:
        return f"SeededSamples({self.dataset!r}, seed={self.seed})"


@dataclass
class RNGSnapshot:
    """The states of the generators a loader's order is drawn from, as bytes: torch's
    global generator and any ``torch.Generator`` of the loader and its samplers, taken
    when an epoch's ``iter()`` began. ``base_draw``: DataLoader then drew its workers'
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
        torch.set_rng_state(_state(self.states["torch"]))
        for name, generator in generators.items():
            if name in self.states:
                generator.set_state(_state(self.states[name]))
        if self.base_draw:
            torch.empty((), dtype=torch.int64).random_(generator=base_generator)
        try:
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
    ``yielded``: the batches the loader's iterator has handed out since."""

    epoch: int
    snapshot: RNGSnapshot
    skip: int = 0
    replay: bool = False
    yielded: int = 0
    key_epoch: int = 0
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    base: torch.Generator | None = None


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
        place: contextlib.AbstractContextManager = contextlib.nullcontext()
        if progress.replay:
            place = progress.snapshot.replayed(progress.generators, progress.base)
        with place:  # a sampler draws its epoch's order at iter() or at its first batch
            batches = iter(self.inner)
            first = next(batches, _END)
        if first is _END:
            return
        for batch in itertools.islice(itertools.chain([first], batches), progress.skip, None):
            single = isinstance(batch, (int, np.integer))  # batch_size=None
            if self.track:
                self.dispatched.append((epoch, [int(batch)] if single else [int(i) for i in batch]))
            if self.keyed:
                batch = (epoch, int(batch)) if single else [(epoch, int(i)) for i in batch]
            yield batch
