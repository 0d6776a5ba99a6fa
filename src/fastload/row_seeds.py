"""Per-sample seeds inside one batch call.

With ``FastLoader(seed=...)``, a dataset that fetches a batch itself (``__getitems__``) is
called once per batch, not once per sample. While that call runs, :func:`current_seeds`
gives the keyed seed of each index it was passed, and :func:`seeded_rows` seeds Python's,
NumPy's and torch's generators from row ``i``'s seed before the row is loaded: a row's
random draws are then the ones it gets when loaded alone, whatever batch it is in.

Example: a dataset that reads a batch at once and augments row by row.

    >>> import torch
    >>> from fastload.row_seeds import seeded_rows
    >>> class Noisy(torch.utils.data.Dataset):
    ...     def __len__(self):
    ...         return 8
    ...     def __getitem__(self, index):
    ...         return self.__getitems__([index])[0]
    ...     def __getitems__(self, indices):
    ...         rows = torch.tensor(indices, dtype=torch.float32)  # one read for the batch
    ...         return [rows[row] + torch.rand(()) for row in seeded_rows(len(indices))]
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import numpy as np
import torch

from fastload.hashing import GOLDEN, splitmix64_array

__all__ = ["batch_seed", "current_seeds", "loading_seeds", "seed_generators", "seeded_rows"]

_CURRENT: ContextVar[Sequence[int] | None] = ContextVar("fastload_row_seeds", default=None)


def seed_generators(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's CPU generator from one 63-bit ``seed`` (CUDA's
    generator is the training loop's, left alone)."""
    random.seed(seed)
    np.random.seed(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32))  # all 63 bits
    torch.default_generator.manual_seed(seed)


def current_seeds() -> Sequence[int] | None:
    """The keyed seed of each index of the batch being loaded, in the order the dataset's
    ``__getitems__`` was given them; None outside a seeded loader's batch call."""
    return _CURRENT.get()


@contextlib.contextmanager
def loading_seeds(seeds: Sequence[int]) -> Iterator[None]:
    """:func:`current_seeds` is ``seeds`` inside the block (the seeded loader's side)."""
    token = _CURRENT.set(seeds)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def seeded_rows(count: int) -> Iterator[int]:
    """``0 .. count - 1``; inside a seeded loader's batch call, the generators are seeded
    from row ``i``'s keyed seed just before ``i`` is handed out."""
    seeds = current_seeds()
    if seeds is not None and len(seeds) != count:
        raise ValueError(f"{count} rows for a batch of {len(seeds)} keyed seeds")
    for row in range(count):
        if seeds is not None:
            seed_generators(seeds[row])
        yield row


def batch_seed(seeds: Sequence[int]) -> int:
    """One 63-bit seed for a whole batch, a function of its samples' seeds in order: what
    a batch call that does not seed row by row draws from."""
    positions = np.arange(1, len(seeds) + 1, dtype=np.uint64) * np.uint64(GOLDEN)
    mixed = splitmix64_array(np.asarray(seeds, dtype=np.int64).astype(np.uint64) ^ positions)
    return int(np.bitwise_xor.reduce(mixed, initial=np.uint64(0))) >> 1
