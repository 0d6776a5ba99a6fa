"""splitmix64: the 64-bit mixing function behind fastload's per-sample seeds, on Python
ints and on NumPy arrays (the device-side twin on int64 tensors is in
:mod:`fastload.gpu.keyed`)."""

from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN", "MASK64", "MIX1", "MIX2", "splitmix64", "splitmix64_array"]

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
