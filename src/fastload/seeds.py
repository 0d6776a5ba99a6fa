"""Per-sample seeds, all of them: the hash, the keyed rule, the seeds of a batch call's
rows, and the GPU transforms' draws.

- **The hash**: splitmix64 (:func:`splitmix64`, on Python ints, NumPy arrays and, for
  the GPU draws, int64 tensors on the batch's device).
- **The keyed rule**: with ``FastLoader(seed=...)``, sample ``index`` of ``epoch`` is
  loaded with the generators seeded from :func:`sample_seed` ``(seed, epoch, index)``
  alone (:func:`keyed_seeds` for a batch in one pass), so its augmentation does not
  depend on the worker, the worker count or the world size.
- **Row seeds**: a dataset that fetches a batch itself (``__getitems__``) is called once
  per batch, not once per sample. While that call runs, :func:`current_seeds` gives the
  keyed seed of each index it was passed, and :func:`seeded_rows` seeds Python's, NumPy's
  and torch's generators from row ``i``'s seed before the row is loaded: a row's random
  draws are then the ones it gets when loaded alone, whatever batch it is in. One that
  does not seed row by row draws from :func:`batch_seed`.
- **GPU draws**: inside :func:`sample_seeds` (``fastload.gpu.sample_seeds``), a
  ``fastload.gpu`` module without a generator of its own draws sample ``i``'s parameters
  from ``seeds[i]`` alone, by the same hash computed on the batch's device: a sample gets
  the same augmentation whatever batch, worker or rank it lands in, and a resumed run
  replays it exactly.

Example: a dataset that reads a batch at once and augments row by row.

    >>> import torch
    >>> from fastload.seeds import seeded_rows
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
import functools
import math
import random
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "SampleKey",
    "SeedDraws",
    "batch_seed",
    "current_seeds",
    "keyed",
    "keyed_generator",
    "keyed_normal",
    "keyed_seeds",
    "keyed_uniform",
    "loading_seeds",
    "sample_seed",
    "sample_seeds",
    "seed_draws",
    "seed_generators",
    "seeded_rows",
    "splitmix64",
    "splitmix64_array",
]

# --- the hash ---------------------------------------------------------------------------------

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio: splitmix64's increment
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def splitmix64(x: int) -> int:
    """splitmix64's finaliser of ``x`` (taken modulo 2**64): a bijection on 64 bits.

    Example:
        >>> splitmix64(0), splitmix64(1) != splitmix64(2)
        (0, True)
    """
    x &= MASK64
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`splitmix64` of each element of a uint64 array (its arithmetic wraps modulo
    2**64, as the Python version masks): a batch's seeds in one pass.

    Example:
        >>> int(splitmix64_array(np.array([2], np.uint64))[0]) == splitmix64(2)
        True
    """
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(MIX1)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(MIX2)
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


# --- the keyed rule -------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _epoch_keys(seed: int, epoch: int) -> tuple[int, int]:
    first, second = np.random.SeedSequence([seed, epoch]).generate_state(2, np.uint64)
    return int(first), int(second)


class SampleKey(NamedTuple):
    """What a keyed loader asks its dataset for: sample ``sample_index`` of ``epoch``,
    loaded with the generators seeded from ``(seed, epoch, sample_index)``. A type of its
    own, so that a dataset indexed by plain pairs ``(row, column)`` is never taken for a
    keyed one."""

    epoch: int
    sample_index: int


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


# --- the rows of a batch call --------------------------------------------------------------------

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


# --- the GPU transforms' draws -----------------------------------------------------------------


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores."""
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(GOLDEN), _signed(MIX1), _signed(MIX2)


def _shift_right(x: Tensor, bits: int) -> Tensor:
    return (x >> bits) & ((1 << (64 - bits)) - 1)  # logical: torch's >> keeps the sign


def _mix(x: Tensor) -> Tensor:
    """:func:`splitmix64` on int64 tensors (products wrap, as unsigned
    ones would)."""
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def _stream(draw: int) -> int:
    """A well-mixed 64-bit constant for the ``draw``-th call within a batch."""
    return _signed(splitmix64((draw + 1) * GOLDEN))


@dataclass
class SeedDraws:
    """A batch's per-sample seeds and the draws made from them so far: a batch planned
    on one thread and finished on another continues its draws there."""

    cpu: Tensor
    draws: int = 0
    on_device: dict[torch.device, Tensor] = field(default_factory=dict)
    generator: torch.Generator | None = None  # the batch's CPU generator, made on first use

    def to(self, device: torch.device) -> Tensor:
        if device not in self.on_device:
            self.on_device[device] = self.cpu.to(device, non_blocking=True)
        return self.on_device[device]


_ACTIVE: ContextVar[SeedDraws | None] = ContextVar("fastload_gpu_sample_seeds", default=None)


@contextlib.contextmanager
def sample_seeds(seeds: Tensor | np.ndarray | Sequence[int] | SeedDraws) -> Iterator[None]:
    """Draw every sample's parameters from its own seed within the block.

    ``seeds``: one int64 per sample of the batches transformed in the block, in batch
    order (``FastLoader(seed=...)`` makes them from ``(seed, epoch, index)``;
    DataPrefetcher applies them by itself). Modules given a ``generator`` keep drawing
    from it. What is drawn once per batch (ColorJitter's order of operations) and the
    Gamma draws behind MixUp's, CutMix's and AugMix's weights come from a CPU generator of
    the batch's own (:func:`keyed_generator`), seeded from its first sample's seed: the
    same batch gets them again, but they are the batch's, not each sample's. torch's
    global generator is not touched: the block may run on a thread beside the training
    loop's.

    Example:
        >>> from fastload import gpu
        >>> images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
        >>> erase = gpu.RandomErasing(p=1.0, value=255)
        >>> with gpu.sample_seeds([11, 12]):
        ...     pair = erase(images)
        >>> with gpu.sample_seeds([12]):
        ...     alone = erase(images[1:])
        >>> torch.equal(pair[1:], alone)
        True
    """
    draws = seeds if isinstance(seeds, SeedDraws) else seed_draws(seeds)
    token = _ACTIVE.set(draws)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def seed_draws(seeds: Tensor | np.ndarray | Sequence[int]) -> SeedDraws:
    """``seeds`` (one int64 per sample), no draw made yet: give it to
    :func:`sample_seeds` in each block that draws for the batch, in order."""
    return SeedDraws(torch.as_tensor(np.asarray(seeds, dtype=np.int64)).reshape(-1))


def keyed_generator() -> torch.Generator | None:
    """Inside :func:`sample_seeds`, the batch's CPU generator (seeded from its first
    sample's seed, its draws continuing across the blocks of one batch); else None."""
    draws = _ACTIVE.get()
    if draws is None:
        return None
    if draws.generator is None:
        first = int(draws.cpu[0]) if len(draws.cpu) else 0
        draws.generator = torch.Generator().manual_seed(first & MASK64 >> 1)
    return draws.generator


def keyed() -> bool:
    """Whether draws are keyed by sample here (inside ``sample_seeds``)."""
    return _ACTIVE.get() is not None


def _next_bits(n: int, extra: Sequence[int], device: torch.device) -> Tensor | None:
    """(n, *extra) int64 hashes for the next draw, or None outside ``sample_seeds``."""
    seeds = _ACTIVE.get()
    if seeds is None:
        return None
    if len(seeds.cpu) != n:
        raise ValueError(f"sample_seeds has {len(seeds.cpu)} seeds for a batch of {n} images")
    stream, seeds.draws = _stream(seeds.draws), seeds.draws + 1
    count = math.prod(extra)
    counter = torch.arange(1, count + 1, device=device, dtype=torch.int64) * _GOLDEN
    keys = seeds.to(device).view(n, 1) ^ stream
    return _mix(keys + counter).view(n, *extra)


def keyed_uniform(n: int, extra: Sequence[int], device: torch.device) -> Tensor | None:
    """Uniform float32 in [0, 1), shape (n, *extra), row ``i`` from seed ``i`` alone;
    None outside ``sample_seeds``."""
    bits = _next_bits(n, extra, device)
    if bits is None:
        return None
    return _shift_right(bits, 40).to(torch.float32) * 2.0**-24  # 24 bits: exact in float32


def keyed_normal(n: int, extra: Sequence[int], device: torch.device) -> Tensor | None:
    """Standard normal float32, shape (n, *extra), by Box-Muller from two keyed draws;
    None outside ``sample_seeds``."""
    radius = keyed_uniform(n, extra, device)
    angle = keyed_uniform(n, extra, device)
    if radius is None or angle is None:
        return None
    return torch.sqrt(-2.0 * torch.log1p(-radius)) * torch.cos(2 * math.pi * angle)
