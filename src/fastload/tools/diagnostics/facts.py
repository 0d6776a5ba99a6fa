"""What ``diagnose`` measured, as the rules and the reliability checks read it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Facts"]


@dataclass
class Facts:
    """What the rules look at; measured by ``diagnose`` or given by a test."""

    step_seconds: float  # the median step on a cached batch (0: no step given)
    loader_seconds: float  # one batch from the loader alone (its timed batches' mean)
    wait_fraction: float  # of the real loop (1.0 without a step: the loop is the loader)
    loop_seconds: float = 0.0  # one iteration of the real loop (its timed iterations' mean)
    step_iterations: int = 0  # timed calls of the step, warm-up excluded
    loader_iterations: int = 0  # timed batches of the loader alone
    loop_iterations: int = 0  # timed iterations of the real loop
    step_spread: float = 0.0  # the timed steps' interquartile range over their median
    first_step_seconds: float = 0.0  # the step's first call, one-off costs and all
    warmup: int = 0  # untimed iterations before each measurement
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

    @property
    def loop_over_step(self) -> float | None:
        """The real loop's time per iteration over the step's alone, as measured (never
        clamped; see ``reliability`` for when it cannot be trusted); None without a step."""
        return self.loop_seconds / self.step_seconds if self.step_seconds else None
