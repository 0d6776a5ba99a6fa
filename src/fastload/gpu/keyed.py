"""Per-sample randomness for ``fastload.gpu``: inside ``sample_seeds(seeds)``, a module
without a generator of its own draws sample ``i``'s parameters from ``seeds[i]`` alone,
by a counter-based hash (splitmix64) computed on the batch's device. A sample then gets
the same augmentation whatever batch, worker or rank it lands in, and a resumed run
replays it exactly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from fastload.hashing import GOLDEN, MASK64, MIX1, MIX2, splitmix64

__all__ = [
    "SeedDraws",
    "keyed",
    "keyed_generator",
    "keyed_normal",
    "keyed_uniform",
    "sample_seeds",
    "seed_draws",
]


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores."""
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(GOLDEN), _signed(MIX1), _signed(MIX2)


def _shift_right(x: Tensor, bits: int) -> Tensor:
    return (x >> bits) & ((1 << (64 - bits)) - 1)  # logical: torch's >> keeps the sign


def _mix(x: Tensor) -> Tensor:
    """:func:`fastload.hashing.splitmix64` on int64 tensors (products wrap, as unsigned
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
