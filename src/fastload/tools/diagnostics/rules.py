"""What the measurements mean: the facts ``diagnose`` gathers, and a rule per advice."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from fastload.tools.diagnostics.facts import Facts
from fastload.tools.diagnostics.reliability import ratio_problems

__all__ = ["RULES", "recommend"]


Rule = Callable[[Facts], str | None]


def _loader_bound(facts: Facts) -> bool:
    return facts.wait_fraction > 0.10


def _slowdown(facts: Facts) -> float | None:
    """How much slower an iteration of the real loop is than the step alone; None without
    a step, or where the measurements cannot carry the ratio (no advice rests on it)."""
    return None if ratio_problems(facts) else facts.loop_over_step


def rule_compute_bound(facts: Facts) -> str | None:
    slowdown = _slowdown(facts)
    if facts.wait_fraction < 0.05 and slowdown is not None and slowdown <= 1.15:
        return "compute-bound: data loading is not what slows this loop; look at the model step"
    return None


def rule_contention(facts: Facts) -> str | None:
    slowdown = _slowdown(facts)
    if facts.wait_fraction < 0.10 and slowdown is not None and slowdown > 1.15:
        return (
            f"the step runs {100 * (slowdown - 1):.0f}% slower while the loader runs, "
            "though it seldom waits: the workers compete with it for the CPU; try fewer "
            "workers, or move decoding and augmentation to the GPU"
        )
    return None


def rule_workers(facts: Facts) -> str | None:
    if _loader_bound(facts) and facts.num_workers < facts.cpus:
        return (
            f"more workers: {facts.num_workers} of {facts.cpus} CPUs load data; "
            "use FastLoader(num_workers='auto') or 'tune'"
        )
    return None


def rule_pin_memory(facts: Facts) -> str | None:
    if facts.cuda and not facts.pin_memory:
        return (
            "pin_memory=True (FastLoader's default with CUDA): "
            "host-to-device copies become asynchronous"
        )
    return None


def rule_prefetcher(facts: Facts) -> str | None:
    if facts.cuda and not facts.prefetcher and facts.wait_fraction > 0.05:
        return (
            "wrap the loader in DataPrefetcher: copy and normalise the next batch "
            "while this one trains"
        )
    return None


def rule_lmdb(facts: Facts) -> str | None:
    if facts.storage == "files" and _loader_bound(facts):
        return "many small files: `fastload convert` them into one LMDB file and read LMDBDataset"
    return None


def rule_large_images(facts: Facts) -> str | None:
    if facts.image_side and facts.batch_side and facts.image_side >= 2 * facts.batch_side:
        return (
            f"stored images ({facts.image_side} px) are at least twice the training size "
            f"({facts.batch_side} px): decode at reduced size (min_size=...) or presize "
            "them (`fastload convert --resize`)"
        )
    return None


def rule_cpu_saturated(facts: Facts) -> str | None:
    busy = facts.worker_busy
    if (
        _loader_bound(facts)
        and busy
        and statistics.fmean(busy) > 0.85
        and facts.num_workers >= facts.cpus
    ):
        where = (
            "the GPU: fastload.gpu augmentation and GPUDecoder"
            if facts.cuda
            else "fewer, cheaper CPU transforms"
        )
        load = 100 * statistics.fmean(busy)
        return (
            f"the CPU is saturated ({facts.num_workers} workers at {load:.0f}%): "
            f"move work to {where}"
        )
    return None


def rule_batch_size(facts: Facts) -> str | None:
    if facts.batch_size is not None and facts.batch_size < 32 and _loader_bound(facts):
        return (
            f"batch size {facts.batch_size}: each batch pays a fixed cost to cross from the "
            "workers; a larger batch (or fewer workers, see `fastload bench`) amortises it"
        )
    return None


RULES: tuple[Rule, ...] = (
    rule_compute_bound,
    rule_contention,
    rule_workers,
    rule_pin_memory,
    rule_prefetcher,
    rule_lmdb,
    rule_large_images,
    rule_cpu_saturated,
    rule_batch_size,
)


def recommend(facts: Facts) -> list[str]:
    """Every rule's advice that applies, in order of importance."""
    return [advice for rule in RULES if (advice := rule(facts)) is not None]
