"""``fastload.diagnose``: time the step, the loader and the real loop, then say what to do."""

from __future__ import annotations

import json
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from fastload._checks import check_int
from fastload.loader.tuning import one_pass
from fastload.system import available_cpus, default_device
from fastload.tools.diagnostics.facts import Facts
from fastload.tools.diagnostics.procstats import children, process_cpu, rss_bytes
from fastload.tools.diagnostics.reliability import (
    MIN_ITERATIONS,
    problems,
    ratio_problems,
    spread,
)
from fastload.tools.diagnostics.rules import recommend
from fastload.tools.diagnostics.waits import WaitSummary, synchronize, timed
from fastload.tools.measure import format_table
from fastload.typed_torch import backward, length

__all__ = ["DiagnoseReport", "classifier_step", "diagnose"]


@dataclass
class DiagnoseReport:
    """The three measurements, how far they can be trusted, and what to do."""

    facts: Facts
    recommendations: list[str]
    memory_mb: float | None = None
    timeline: WaitSummary | None = field(default=None, repr=False)

    @property
    def problems(self) -> list[str]:
        """Why a measurement, or the ratio of the loop's time to the step's, cannot be
        trusted (too few iterations, an unsteady step, a step slower than the loop that
        holds it, one-off costs timed); empty when they can."""
        return problems(self.facts)

    @property
    def reliable(self) -> bool:
        """Whether every measurement, and so the ratio, can be trusted (no problems)."""
        return not self.problems

    def _step(self) -> str:
        f = self.facts
        if not f.step_seconds:
            return "not measured"
        where = "among them" if f.warmup == 0 else "untimed"
        return (
            f"{1000 * f.step_seconds:.1f} ms, median of {f.step_iterations} "
            f"(first call {1000 * f.first_step_seconds:.1f} ms, {where})"
        )

    def _per_iteration(self) -> str:
        """The loop's time per iteration, and what it is over the step alone: waiting for
        data, and the step slowed by workers that share its CPU, together."""
        f = self.facts
        loop = f"{1000 * f.loop_seconds:.1f} ms, mean of {f.loop_iterations}"
        if f.loop_over_step is None:
            return loop
        trust = ": unreliable, see below" if ratio_problems(f) else ""
        return f"{loop} ({f.loop_over_step:.2f}x the step alone{trust})"

    def _measurements(self) -> str:
        found = self.problems
        if found:
            return "Measurements: unreliable\n" + "\n".join(f"- {line}" for line in found)
        return (
            f"Measurements: reliable, each timed over at least {MIN_ITERATIONS} iterations "
            f"after a warm-up of {self.facts.warmup}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.facts),
            "loop_over_step": self.facts.loop_over_step,
            "min_iterations": MIN_ITERATIONS,
            "reliable": self.reliable,
            "problems": self.problems,
            "memory_mb": self.memory_mb,
            "recommendations": self.recommendations,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        f = self.facts
        rows = [
            ["training step on a cached batch", self._step()],
            [
                "loader alone, per batch",
                f"{1000 * f.loader_seconds:.1f} ms, mean of {f.loader_iterations}",
            ],
            ["real loop: waiting for data", f"{100 * f.wait_fraction:.1f}%"],
            ["real loop, per iteration", self._per_iteration()],
            [
                "workers (CPU busy each)",
                f"{f.num_workers} ({', '.join(f'{100 * b:.0f}%' for b in f.worker_busy) or '-'})",
            ],
            ["memory, process and workers", f"{self.memory_mb:.0f} MB" if self.memory_mb else "-"],
        ]
        nothing = "nothing to change" if self.reliable else "none: measure again, as said above"
        advice = "\n".join(f"- {line}" for line in self.recommendations) or f"- {nothing}"
        table = format_table(["measure", "value"], rows)
        return f"{table}\n\n{self._measurements()}\n\nRecommendations:\n{advice}"


def _storage(dataset: Any) -> tuple[str, int | None]:
    """'files', 'lmdb' or 'memory', and the longest side of a stored image if known."""
    inner = getattr(dataset, "dataset", dataset)
    kind = type(inner).__name__
    if kind == "LMDBDataset":
        return "lmdb", None
    samples = getattr(inner, "samples", None)
    if samples and isinstance(samples[0], (tuple, list)) and isinstance(samples[0][0], str):
        from PIL import Image

        try:
            with Image.open(samples[0][0]) as image:
                return "files", max(image.size)
        except OSError:
            return "files", None
    return "memory", None


def _image_tensor(batch: Any) -> torch.Tensor | None:
    from fastload.batches import image_leaf_path

    path = image_leaf_path(batch)
    if path is None:
        return None
    for key in path:
        batch = batch[key]
    image: torch.Tensor = batch  # the tensor leaf image_leaf_path found
    return image


class _Phases:
    """Each measurement's share of the time (``seconds / 3``; none without ``seconds``) and
    the progress bar: in seconds with a budget, in iterations without."""

    def __init__(
        self, seconds: float | None, iterations: int, progress: bool, *, least: int
    ) -> None:
        from tqdm import tqdm

        self.share = None if seconds is None else seconds / 3
        total = 3 * iterations if seconds is None else round(seconds)
        unit = "it" if seconds is None else "s"
        shown = "{l_bar}{bar}| {n_fmt}/{total_fmt} " + unit  # a rate in s/s says nothing
        self.bar = tqdm(total=total, desc="diagnose", bar_format=shown, disable=not progress)
        self.done, self.end, self.started = 0, float("inf"), time.perf_counter()
        self.least = least  # timed iterations before the time can stop a measurement

    def begin(self) -> None:
        self.started = time.perf_counter()
        self.end = self.started + self.share if self.share is not None else float("inf")

    def tick(self) -> None:
        if self.share is None:
            self.bar.update()
        else:  # the bar shows this measurement's time, up to its share
            elapsed = min(time.perf_counter() - self.started, self.share)
            self.bar.n = round(self.done * self.share + elapsed)
            self.bar.refresh()

    def enough(self, timed: int) -> bool:
        """Whether a measurement that has timed ``timed`` iterations may stop: at least
        ``least`` of them, and its share of the time is up."""
        return timed >= self.least and time.perf_counter() >= self.end

    def finish(self) -> None:
        self.done += 1
        if self.share is not None:
            self.bar.n = round(self.done * self.share)
            self.bar.refresh()


def diagnose(
    loader: Iterable[Any],
    step: Callable[[Any], Any] | None = None,
    *,
    batches: int = 50,
    warmup: int = 5,
    seconds: float | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> DiagnoseReport:
    """Measure whether data loading slows the loop ``for batch in loader: step(batch)``.

    1. ``step`` on one cached batch: the compute-bound time (the median of its calls);
    2. the loader alone (batches per second, with the CPU use of each worker);
    3. the real loop: the fraction of time waiting for data, the time per iteration.
    Each times ``batches`` iterations after ``warmup`` untimed ones, or stops earlier at
    its third of ``seconds``, but never before it has timed ``min(batches, 5)``; timings
    are CUDA-synchronised on a GPU. The report says which measurements cannot be
    trusted, and why: fewer than 5 timed iterations, a step whose calls vary widely, a
    step slower than the loop iteration that holds it (one-off costs past the warm-up,
    other work on the machine), the first call's one-off costs among the timed ones. A
    loader whose batch is larger than its data set is warned of.

    Args:
        loader: A FastLoader, DataLoader, DataPrefetcher or any iterable of batches.
        step: Your training step, called with a batch; None measures the loader only.
        batches: Timed iterations of each measurement, at most (fewer than 5 are
            reported as too few).
        warmup: Untimed iterations before each measurement.
        seconds: About how long the three measurements take together (longer where 5
            iterations of one take longer than its third); None: no limit.
        device: Where ``step`` runs (for synchronisation); default: CUDA if available.
        progress: Show a progress bar (in seconds, with ``seconds``).

    Returns:
        A :class:`DiagnoseReport`: print it, or ``to_dict()``/``to_json()`` it.

    Example:
        >>> loader = [torch.zeros(4, 3, 8, 8)] * 10  # any iterable of batches
        >>> report = diagnose(loader, torch.sum, batches=5, warmup=1, device="cpu")
        >>> report.facts.step_iterations, report.timeline.iterations, report.facts.batch_side
        (5, 5, 8)
        >>> "Measurements: " in str(report) and "Recommendations:" in str(report)
        True
    """
    check_int(batches, "batches", low=1)
    check_int(warmup, "warmup", low=0)
    if seconds is not None and not seconds > 0:  # NaN too
        raise ValueError(f"seconds: a positive time, got {seconds}")
    _warn_if_one_batch_holds_everything(loader)
    device = torch.device(device) if device is not None else default_device()
    phases = _Phases(seconds, batches + warmup, progress, least=min(batches, MIN_ITERATIONS))
    try:  # a failing loader leaves no half-drawn bar before its error
        measured = _measure(loader, step, warmup=warmup, batches=batches, phases=phases,
                            device=device)  # fmt: skip
    finally:
        phases.bar.close()
    facts = _facts(loader, measured, warmup=warmup, device=device, stepped=step is not None)
    memory = [rss_bytes(pid) for pid in [os.getpid(), *children(os.getpid())]]
    total_memory = sum(m for m in memory if m is not None)
    return DiagnoseReport(
        facts, recommend(facts), total_memory / 2**20 if total_memory else None,
        measured.timeline,
    )  # fmt: skip


@dataclass(frozen=True)
class _Measured:
    """The three measurements: each call of the step on the cached batch (warm-up ones
    first), the loader alone, and the real loop's timeline past its warm-up."""

    calls: list[float]
    cached: Any
    loader_seconds: float
    loader_iterations: int
    worker_busy: tuple[float, ...]
    timeline: WaitSummary


def _measure(
    loader: Iterable[Any],
    step: Callable[[Any], Any] | None,
    *,
    warmup: int,
    batches: int,
    phases: _Phases,
    device: torch.device,
) -> _Measured:
    """The step on one cached batch, then the loader alone, then the real loop."""
    calls: list[float] = []
    cached = None
    if step is not None:
        cached = next(iter(loader), None)
        if cached is None:
            raise ValueError("loader: it gave no batch to time the step on")
        calls = _time_step(step, cached, warmup, batches, phases, device)
    phases.finish()
    loader_seconds, loader_count, busy = _time_loader(loader, warmup, batches, phases)
    phases.finish()
    loop = timed(_limited(loader, warmup + batches), synchronize=device)
    phases.begin()
    for index, batch in enumerate(loop):
        if step is not None:
            step(batch)
        phases.tick()
        if phases.enough(index + 1 - warmup):
            break
    phases.finish()
    timeline = WaitSummary(tuple(loop.waits[warmup:]), tuple(loop.computes[warmup:]))
    return _Measured(calls, cached, loader_seconds, loader_count, busy, timeline)


def _facts(
    loader: Iterable[Any], measured: _Measured, *, warmup: int, device: torch.device,
    stepped: bool,
) -> Facts:  # fmt: skip
    """What the rules judge: the measurements, and what the loader and machine are."""
    from fastload.prefetch import DataPrefetcher

    timed_calls, timeline = measured.calls[warmup:], measured.timeline
    base = getattr(loader, "loader", loader)  # through a DataPrefetcher
    dataset = getattr(base, "dataset", None)
    storage, image_side = _storage(dataset) if dataset is not None else ("memory", None)
    sample = _image_tensor(measured.cached) if measured.cached is not None else None
    return Facts(
        step_seconds=statistics.median(timed_calls) if timed_calls else 0.0,
        loader_seconds=measured.loader_seconds,
        wait_fraction=timeline.wait_fraction if stepped else 1.0,
        loop_seconds=(timeline.wait_seconds + timeline.compute_seconds)
        / max(timeline.iterations, 1),
        step_iterations=len(timed_calls),
        loader_iterations=measured.loader_iterations,
        loop_iterations=timeline.iterations,
        step_spread=spread(timed_calls),
        first_step_seconds=measured.calls[0] if measured.calls else 0.0,
        warmup=warmup,
        batch_size=getattr(base, "batch_size", None),
        num_workers=getattr(base, "num_workers", 0),
        cpus=available_cpus(),
        cuda=device.type == "cuda",
        pin_memory=bool(getattr(base, "pin_memory", False)),
        prefetcher=isinstance(loader, DataPrefetcher),
        worker_busy=measured.worker_busy,
        storage=storage,
        image_side=image_side,
        batch_side=max(sample.shape[-2:]) if sample is not None and sample.dim() >= 3 else None,
    )


def _time_step(
    step: Callable[[Any], Any],
    batch: Any,
    warmup: int,
    batches: int,
    phases: _Phases,
    device: torch.device,
) -> list[float]:
    """The seconds of each call of ``step`` on ``batch``, the ``warmup`` untimed ones
    first, each call on its own clock so that a slow one cannot hide in a mean; up to
    ``batches`` timed ones, fewer once the phase has timed enough and its time is up."""
    seconds: list[float] = []
    phases.begin()
    synchronize(device)  # the batch's copy is not the step's
    for _ in range(warmup + batches):
        start = time.perf_counter()
        step(batch)
        synchronize(device)
        seconds.append(time.perf_counter() - start)
        phases.tick()
        if phases.enough(len(seconds) - warmup):
            break
    return seconds


def _time_loader(
    loader: Iterable[Any], warmup: int, batches: int, phases: _Phases
) -> tuple[float, int, tuple[float, ...]]:
    """The loader alone: seconds per batch over the timed ones (a rate: batches from
    workers come in bursts, so a single batch's time says little), their count, and the
    CPU use of each worker meanwhile."""
    phases.begin()
    batches_alone = one_pass(loader, warmup + batches)
    for _ in range(warmup):
        next(batches_alone, None)
        phases.tick()
    workers_before = process_cpu(children(os.getpid()))
    wall_start, count = time.perf_counter(), 0
    for _batch in batches_alone:  # the clock runs from the end of the warm-up
        count += 1
        phases.tick()
        if phases.enough(count):
            break
    elapsed = time.perf_counter() - wall_start
    workers_after = process_cpu(children(os.getpid()))
    busy = tuple(
        min(1.0, (workers_after[pid] - workers_before[pid]) / elapsed)
        for pid in sorted(workers_after)
        if pid in workers_before and elapsed > 0
    )
    return elapsed / max(count, 1), count, busy


def _warn_if_one_batch_holds_everything(loader: Iterable[Any]) -> None:
    base = getattr(loader, "loader", loader)  # through a DataPrefetcher
    dataset, batch_size = getattr(base, "dataset", None), getattr(base, "batch_size", None)
    try:
        size = length(dataset)
    except TypeError:
        return
    if isinstance(batch_size, int) and batch_size > size:
        warnings.warn(
            f"a batch of {batch_size} from a data set of {size}: every batch is the whole "
            "data set, smaller than the batch your training uses; measure with more data "
            "or a smaller batch",
            stacklevel=3,
        )


def _limited(loader: Iterable[Any], count: int) -> Iterable[Any]:
    class Limited:
        def __iter__(self) -> Iterator[Any]:
            return one_pass(loader, count)

    return Limited()


def classifier_step(model: str, num_classes: int, device: torch.device) -> Callable[[Any], None]:
    """A training step of a torchvision classifier (SGD, cross-entropy) on an
    ``(images, labels)`` batch: what ``fastload diagnose`` and the demo measure with."""
    import torchvision

    network = getattr(torchvision.models, model)(num_classes=max(2, num_classes)).to(device)
    optimizer = torch.optim.SGD(network.parameters(), lr=0.01, momentum=0.9)

    def step(batch: Any) -> None:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(network(images), labels)
        optimizer.zero_grad(set_to_none=True)
        backward(loss)
        optimizer.step()

    return step
