"""Argument checks shared by the package: each refuses a bad value where it is given,
with a message that names the argument and what it got.

Example:
    >>> check_int(4, "batch_size", low=1)
    4
    >>> check_int(True, "batch_size", low=1)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be an int >= 1, got True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["check_image_size", "check_int", "check_probability", "finite", "pair", "positive_pair"]


def check_int(value: object, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``; a ValueError otherwise."""
    in_range = (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (low is None or value >= low)
        and (high is None or value <= high)
    )
    if not in_range:
        if low is not None and high is not None:
            bound = f" in [{low}, {high}]"
        elif low is not None:
            bound = f" >= {low}"
        elif high is not None:
            bound = f" <= {high}"
        else:
            bound = ""
        raise ValueError(f"{name} must be an int{bound}, got {value!r}")
    return value  # type: ignore[return-value]


def finite(value: float, name: str) -> float:
    """``value`` as a float; a NaN or infinite argument is refused where it is given (it
    would otherwise turn images black, silently)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def pair(value: float | Sequence[float], name: str) -> tuple[float, float]:
    """A number ``v`` as ``(v, v)``, or a finite ``(min, max)`` pair with min <= max."""
    if isinstance(value, (int, float)):
        return finite(value, name), finite(value, name)
    if len(value) != 2:
        raise ValueError(f"{name} must be a number or a (min, max) pair, got {value!r}")
    low, high = finite(value[0], name), finite(value[1], name)
    if low > high:
        raise ValueError(f"{name} must be (min, max) with min <= max, got {value!r}")
    return low, high


def positive_pair(value: float | Sequence[float], name: str) -> tuple[float, float]:
    """A number ``v`` as ``(v, v)``, or a ``(low, high)`` pair, finite with
    ``0 < low <= high`` (a crop's scale and aspect-ratio ranges)."""
    values = (value, value) if isinstance(value, (int, float)) else value
    if len(values) == 2:
        low, high = finite(values[0], name), finite(values[1], name)
        if 0 < low <= high:
            return low, high
    raise ValueError(f"{name} must be (low, high) with 0 < low <= high, got {value!r}")


def check_probability(p: float, name: str = "p") -> float:
    """``p`` as a float in [0, 1]; NaN is refused too."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def check_image_size(height: float, width: float, what: str) -> None:
    """A ValueError naming ``what`` for an image of no pixels (a header saying a height of
    0, say), in which no box can be drawn."""
    if not (height >= 1 and width >= 1):
        raise ValueError(
            f"{what} is {height:g}x{width:g} pixels (height x width): no box fits in it"
        )
