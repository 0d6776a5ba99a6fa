"""Whether ``diagnose``'s measurements can carry its ratios: enough timed iterations, a
steady step, and a step no slower than the loop iteration that holds it.

A ratio is never clamped: where a measurement cannot be trusted, the report prints the
number it got and says why it is unreliable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fastload.tools.diagnostics.facts import Facts

__all__ = ["MIN_ITERATIONS", "problems", "ratio_problems", "spread"]

MIN_ITERATIONS = 5  # timed iterations a measurement needs for a median and a spread
SPREAD_LIMIT = 0.25  # the timed steps' interquartile range over their median
ONE_OFF = 2.0  # a first call this many times the median paid one-off costs
NOISE = 0.05  # a loop iteration this much faster than the step alone is not noise
ONE_OFF_COSTS = "one-off costs (compilation, memory allocation, cuDNN's algorithm search)"


def spread(seconds: Sequence[float]) -> float:
    """The interquartile range of ``seconds`` over their median; 0 for fewer than two.

    Example:
        >>> spread([1.0, 1.0, 1.0, 1.0])
        0.0
        >>> spread([1.0, 2.0, 3.0, 4.0, 5.0])
        0.6666666666666666
    """
    if len(seconds) < 2:
        return 0.0
    lower, middle, upper = statistics.quantiles(seconds, n=4, method="inclusive")
    return (upper - lower) / middle if middle > 0 else 0.0


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def _too_few(what: str, count: int, units: tuple[str, str]) -> list[str]:
    if count >= MIN_ITERATIONS:
        return []
    return [
        f"{what} was timed over {count} {units[count != 1]}, fewer than {MIN_ITERATIONS}: "
        "too few to trust; raise batches (--batches)"
    ]


def _step_too_few(facts: Facts) -> list[str]:
    return _too_few("the step on a cached batch", facts.step_iterations, ("call", "calls"))


def _loop_too_few(facts: Facts) -> list[str]:
    return _too_few("the real loop", facts.loop_iterations, ("iteration", "iterations"))


def _first_call(facts: Facts) -> str:
    """The step's first call where it was far slower than the median, or nothing."""
    if facts.first_step_seconds <= ONE_OFF * facts.step_seconds:
        return ""
    ratio = facts.first_step_seconds / facts.step_seconds
    return f"its first call took {_ms(facts.first_step_seconds)}, {ratio:.1f}x the median"


def _step_problems(facts: Facts) -> list[str]:
    """What makes a measured step's median untrustworthy, beyond its count."""
    found = []
    first_call = _first_call(facts)
    if facts.warmup == 0 and first_call:
        found.append(
            f"no warm-up: the step's {ONE_OFF_COSTS} are among its timed calls "
            f"({first_call}); raise warmup (--warmup)"
        )
    if facts.step_spread > SPREAD_LIMIT:
        found.append(
            f"the step on a cached batch is unsteady: the middle half of its "
            f"{facts.step_iterations} timed calls spans {100 * facts.step_spread:.0f}% of their "
            f"median, more than {100 * SPREAD_LIMIT:.0f}%: other work on this machine, or "
            "more threads than CPU cores; measure again on a quiet machine"
        )
    if facts.loop_seconds < (1 - NOISE) * facts.step_seconds:
        evidence = f" ({first_call})" if first_call else ""
        found.append(
            f"the step alone ({_ms(facts.step_seconds)}, median) took longer than a whole "
            f"iteration of the real loop ({_ms(facts.loop_seconds)}), which holds one step: "
            "the step measurement is unreliable, and so is the ratio "
            f"({facts.loop_seconds / facts.step_seconds:.2f}x); likely causes: "
            f"{ONE_OFF_COSTS} outlasting a warm-up of {facts.warmup}{evidence}, or other work "
            "on this machine while the step was timed; raise warmup (--warmup) and measure "
            "again on a quiet machine"
        )
    return found


def ratio_problems(facts: Facts) -> list[str]:
    """Why the real loop's time over the step's cannot be trusted; empty where it can (or
    where no step was measured, so there is no ratio)."""
    if not facts.step_seconds:
        return []
    return _step_too_few(facts) + _loop_too_few(facts) + _step_problems(facts)


def problems(facts: Facts) -> list[str]:
    """Every reason a measurement is unreliable: too few iterations of any, then the
    step's own (unsteady, slower than the loop, one-off costs timed)."""
    loader = _too_few("the loader alone", facts.loader_iterations, ("batch", "batches"))
    if not facts.step_seconds:
        return _loop_too_few(facts) + loader
    return _step_too_few(facts) + _loop_too_few(facts) + loader + _step_problems(facts)
