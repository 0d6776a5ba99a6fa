"""Randomness keyed by sample: with a ``seed``, each sample is loaded with Python's,
NumPy's and torch's generators seeded from ``(seed, epoch, index)`` (:class:`SeededSamples`,
in whichever process loads it), so a sample's augmentation draws do not depend on the
worker, the worker count or the world size (the rule: :mod:`fastload.seeds`, which gives
the same keys to the GPU transforms).

A dataset that fetches a batch itself (``__getitems__``: LMDBDataset, a Hugging Face
``Dataset``) is still called once per batch: the call sees its rows' seeds through
:mod:`fastload.seeds`, and one that seeds row by row (``seeded_rows``) draws exactly
as if loaded one sample at a time; one that does not draws from a seed of the batch.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, RandomSampler, Subset, get_worker_info

from fastload._checks import check_int
from fastload.loader.errors import fetch_batch, note_failure
from fastload.loader.proxy import DatasetProxy
from fastload.seeds import (
    SampleKey,
    batch_seed,
    keyed_seeds,
    loading_seeds,
    sample_seed,
    seed_generators,
)

__all__ = ["SeededSamples", "fetches_batches", "order_generator", "seeded_order"]


#: Keyed loads in the main process seed the process's global generators: two threads
#: loading at once (two prefetchers' reader threads, one beginning its next epoch ahead)
#: would draw from each other's seeds.
_GLOBAL_GENERATORS = threading.RLock()


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's global generators as they were, after the block,
    which no other keyed load in this process runs beside."""
    with _GLOBAL_GENERATORS:
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


def order_generator(
    seed: int | None, generator: torch.Generator | None, options: dict[str, Any]
) -> torch.Generator | None:
    """The generator of the sampler's draws: with ``seed`` (checked), one seeded from it
    unless the user gave their own."""
    if seed is None:
        return generator
    check_int(seed, "seed", low=0, high=2**63 - 1)
    if options.get("in_order") is False:
        raise ValueError("seed needs in_order=True: a batch's seeds follow its order")
    return torch.Generator().manual_seed(seed) if generator is None else generator


def seeded_order(dataset: Sized, seed: int) -> RandomSampler:
    """A shuffled order drawn from a generator of its own, seeded from ``seed``: the
    loader's generator also draws the workers' base seed at each new iterator, which
    persistent workers draw once only, so an order drawn from it would depend on the
    worker count."""
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


class SeededSamples(DatasetProxy):
    """What FastLoader hands to DataLoader[Any] when it has a ``seed``: it loads a key
    (:class:`~fastload.seeds.SampleKey` ``(epoch, index)``) with Python's, NumPy's and
    torch's generators seeded from ``(seed, epoch, index)``, so that the sample's
    augmentation draws are its own.

    A dataset with a batched fetch of its own is called once per batch, its rows' seeds
    in :func:`fastload.seeds.current_seeds`. In the main process (``num_workers=0``)
    the training loop's generators are put back after each batch. A plain index loads
    the sample unseeded. Other attributes are the wrapped dataset's.
    """

    def __init__(self, dataset: Dataset[Any], seed: int) -> None:
        super().__init__(dataset)
        self.seed = seed
        self.batched = fetches_batches(dataset)

    def _load(self, key: Any) -> Any:
        if not isinstance(key, SampleKey):
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
        if not self.batched or not keys or not isinstance(keys[0], SampleKey):
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
