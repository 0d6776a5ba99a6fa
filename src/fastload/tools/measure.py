"""Wall-clock measurement shared by the demo, the benchmarks and diagnostics."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Measurement", "format_table", "measure"]


@dataclass(frozen=True)
class Measurement:
    """Seconds of each timed repeat (warm-up runs excluded)."""

    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def measure(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1) -> Measurement:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    Example:
        >>> measure(lambda: sum(range(1000)), repeats=3).median >= 0
        True
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return Measurement(tuple(seconds))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, columns padded to line up in a terminal too."""
    cells = [[str(h) for h in headers]] + [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return (
            "| "
            + " | ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
            + " |"
        )

    rule = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])
