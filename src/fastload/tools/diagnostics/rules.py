"""What the measurements mean: the facts ``diagnose`` gathers, and a rule per advice."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RULES", "Facts", "recommend"]


@dataclass
class Facts:
    """What the rules look at; measured by ``diagnose`` or given by a test."""

    step_seconds: float  # one training step on a cached batch (0: no step given)
    loader_seconds: float  # one batch from the loader alone
    wait_fraction: float  # of the real loop (1.0 without a step: the loop is the loader)
    loop_seconds: float = 0.0  # one iteration of the real loop
    batch_size: int | None = None
    num_workers: int = 0
    cpus: int = 1
    cuda: bool = False
    pin_memory: bool = False
    prefetcher: bool = False
    worker_busy: tuple[float, ...] = ()  # CPU utilisation of each worker, 0..1
    storage: str = "memory"  # "files", "lmdb" or "memory"
    image_side: int | None = None  # longest side of a stored image
    batch_side: int | None = None  # longest side of an image in the batch


Rule = Callable[[Facts], str | None]


def _loader_bound(facts: Facts) -> bool:
    return facts.wait_fraction > 0.10


def _slowdown(facts: Facts) -> float:
    """How much slower an iteration of the real loop is than the step alone."""
    return facts.loop_seconds / facts.step_seconds if facts.step_seconds else 1.0


def rule_compute_bound(facts: Facts) -> str | None:
    if facts.wait_fraction < 0.05 and facts.step_seconds > 0 and _slowdown(facts) <= 1.15:
        return "compute-bound: data loading is not what slows this loop; look at the model step"
    return None


def rule_contention(facts: Facts) -> str | None:
    if facts.wait_fraction < 0.10 and _slowdown(facts) > 1.15:
        return (
            f"the step runs {100 * (_slowdown(facts) - 1):.0f}% slower while the loader runs, "
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
