"""Checks of the arguments the modules share with torchvision v2 (sizes, fills,
interpolation, symmetric ranges), each refusing a bad value where it is given."""

from __future__ import annotations

from collections.abc import Sequence

from torchvision.transforms import InterpolationMode

from fastload._checks import finite, pair
from fastload.gpu.functional.geometry import Fill

__all__ = ["check_fill", "interpolation_name", "output_size", "resampling", "symmetric", "xy"]


def output_size(size: int | Sequence[int], name: str = "size") -> tuple[int, int]:
    """torchvision's meaning: an int is a square for crops; (h, w) otherwise."""
    if isinstance(size, int):
        size = (size, size)
    if len(size) == 1:
        size = (size[0], size[0])
    if len(size) != 2 or not all(
        isinstance(side, int) and not isinstance(side, bool) and side >= 1 for side in size
    ):
        raise ValueError(f"{name} must be a positive int or (h, w), got {size!r}")
    return size[0], size[1]


def resampling(value: InterpolationMode | str, fill: Fill) -> tuple[str, Fill]:
    """The ``interpolation`` (its name) and ``fill`` of a module that takes each output
    pixel from elsewhere in the image, checked."""
    return interpolation_name(value), check_fill(fill)


def interpolation_name(value: InterpolationMode | str) -> str:
    """'nearest' or 'bilinear', from torchvision's enum or its value."""
    name = value.value if isinstance(value, InterpolationMode) else str(value)
    if name not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be nearest or bilinear, got {value!r}")
    return name


def check_fill(fill: Fill) -> Fill:
    """A fill of finite numbers: one, one per channel, or None."""
    if fill is None:
        return None
    if isinstance(fill, (int, float)):
        return finite(fill, "fill")
    return [finite(value, "fill") for value in fill]


def symmetric(value: float | Sequence[float], name: str) -> tuple[float, float]:
    """A number ``d`` as ``(-d, d)`` (``d >= 0``), or a ``(min, max)`` pair."""
    if isinstance(value, (int, float)):
        number = finite(value, name)
        if number < 0:
            raise ValueError(f"{name} as one number must be >= 0, got {value!r}")
        return -number, number
    return pair(value, name)


def xy(value: float | Sequence[float], name: str) -> tuple[float, float]:
    """A number for both axes or an ``(x, y)`` pair, each >= 0."""
    values = (value, value) if isinstance(value, (int, float)) else tuple(value)
    if len(values) != 2:
        raise ValueError(f"{name} must be a number or an (x, y) pair, got {value!r}")
    x, y = (finite(v, name) for v in values)
    if x < 0 or y < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return x, y
