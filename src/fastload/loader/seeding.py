"""Randomness keyed by sample: with a ``seed``, each sample is loaded with Python's,
NumPy's and torch's generators seeded from ``(seed, epoch, index)`` (:class:`SeededSamples`,
in whichever process loads it), so a sample's augmentation draws do not depend on the
worker, the worker count or the world size. :func:`keyed_seeds` gives the same keys to
the GPU transforms (``fastload.gpu.sample_seeds``).

A dataset that fetches a batch itself (``__getitems__``: LMDBDataset, a Hugging Face
``Dataset``) is still called once per batch: the call sees its rows' seeds through
:mod:`fastload.row_seeds`, and one that seeds row by row (``seeded_rows``) draws exactly
as if loaded one sample at a time; one that does not draws from a seed of the batch.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Iterator, Sequence, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, RandomSampler, Subset, get_worker_info

from fastload.hashing import GOLDEN, splitmix64, splitmix64_array
from fastload.loader.errors import fetch_batch, note_failure
from fastload.loader.proxy import DatasetProxy
from fastload.row_seeds import batch_seed, loading_seeds, seed_generators

__all__ = ["SeededSamples", "fetches_batches", "keyed_seeds", "sample_seed", "seeded_order"]


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
    add, xor = _epoch_keys(seed, epoch)
    keys = np.asarray(indices, dtype=np.int64).astype(np.uint64) * np.uint64(GOLDEN)
    mixed = splitmix64_array(keys + np.uint64(add)) ^ np.uint64(xor)
    return (mixed >> np.uint64(1)).astype(np.int64)


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


def fetches_batches(dataset: Any) -> bool:
    """Whether ``dataset`` fetches a batch in one call of its own: a ``__getitems__``
    that is more than torch's ``Subset`` looping over a dataset without one."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return callable(getattr(dataset, "__getitems__", None))


def seeded_order(dataset: Sized, seed: int) -> RandomSampler:
    """A shuffled order drawn from a generator of its own, seeded from ``seed``: the
    loader's generator also draws the workers' base seed at each new iterator, which
    persistent workers draw once only, so an order drawn from it would depend on the
    worker count."""
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


class SeededSamples(DatasetProxy):
    """What FastLoader hands to DataLoader[Any] when it has a ``seed``: it loads a key
    ``(epoch, index)`` with Python's, NumPy's and torch's generators seeded from
    ``(seed, epoch, index)``, so that the sample's augmentation draws are its own.

    A dataset with a batched fetch of its own is called once per batch, its rows' seeds
    in :func:`fastload.row_seeds.current_seeds`. In the main process (``num_workers=0``)
    the training loop's generators are put back after each batch. A plain index loads
    the sample unseeded. Other attributes are the wrapped dataset's.
    """

    def __init__(self, dataset: Dataset[Any], seed: int) -> None:
        super().__init__(dataset)
        self.seed = seed
        self.batched = fetches_batches(dataset)

    def _load(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        epoch, index = key
        seed_generators(sample_seed(self.seed, epoch, index))
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

    def _load_batch(self, keys: list[Any]) -> Any:
        if not self.batched or not keys or not isinstance(keys[0], tuple):
            return [self._load(key) for key in keys]
        epochs = {epoch for epoch, _ in keys}
        indices = [index for _, index in keys]
        if len(epochs) == 1:
            seeds = keyed_seeds(self.seed, epochs.pop(), indices).tolist()
        else:  # a batch across an epoch's end (a sampler of one's own)
            seeds = [sample_seed(self.seed, *key) for key in keys]
        seed_generators(batch_seed(seeds))
        with loading_seeds(seeds):  # failures named here: the fetch sees only the keys
            return fetch_batch(self.dataset, indices)

    def __getitems__(self, keys: list[Any]) -> Any:
        if get_worker_info() is not None:
            return self._load_batch(keys)
        with _rng_kept():
            return self._load_batch(keys)

    def __repr__(self) -> str:
        return f"SeededSamples({self.dataset!r}, seed={self.seed})"
