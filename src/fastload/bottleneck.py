"""Is data loading what slows training, and by how much? Measure it, then say what to do.

``fastload.diagnose`` and ``fastload.timed`` live here (a module named ``diagnose`` would
shadow the function of the same name on the package).

The method of the articles in shared/seeds (002, 004): time the training step on one
cached batch (the compute-bound time), time the loader alone, and compare with the real
loop's per-iteration wait for data. ``diagnose`` does the three and applies clear rules.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from fastload.loader.proxy import LoaderProxy
from fastload.loader.tuning import one_pass
from fastload.system import available_cpus, default_device
from fastload.timing import format_table

__all__ = [
    "DiagnoseReport",
    "TimedLoader",
    "WaitSummary",
    "classifier_step",
    "cpu_seconds_with_workers",
    "diagnose",
    "timed",
]


def _synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


# --- per-iteration data wait -------------------------------------------------------------------


@dataclass(frozen=True)
class WaitSummary:
    """What a loop spent waiting for data and computing, per iteration."""

    waits: tuple[float, ...]
    computes: tuple[float, ...]

    @property
    def iterations(self) -> int:
        return len(self.waits)

    @property
    def wait_seconds(self) -> float:
        return sum(self.waits)

    @property
    def compute_seconds(self) -> float:
        return sum(self.computes)

    @property
    def wait_fraction(self) -> float:
        total = self.wait_seconds + self.compute_seconds
        return self.wait_seconds / total if total else 0.0

    def __str__(self) -> str:
        if not self.waits:
            return "no iterations"
        mean_wait = 1000 * statistics.fmean(self.waits)
        p95 = 1000 * sorted(self.waits)[int(0.95 * (len(self.waits) - 1))]
        return (
            f"{self.iterations} iterations: waited {self.wait_seconds:.2f} s for data "
            f"({100 * self.wait_fraction:.1f}% of the loop), mean {mean_wait:.1f} ms, "
            f"p95 {p95:.1f} ms"
        )


class TimedLoader(LoaderProxy):
    """Iterate ``loader`` and record, for each iteration, the time spent waiting for the
    batch and the time until the next one was asked for (your step).

    Like the ``data_time`` meter of PyTorch's ImageNet example. ``synchronize`` waits
    for the GPU before each clock reading, so that asynchronous GPU work counts as
    compute rather than as the wait for the next batch.

    Example:
        >>> loop = timed([1, 2, 3])
        >>> [batch for batch in loop]
        [1, 2, 3]
        >>> loop.summary().iterations
        3
    """

    def __init__(
        self, loader: Iterable[Any], *, synchronize: torch.device | str | None = None
    ) -> None:
        self.loader = loader
        self.device = torch.device(synchronize) if synchronize is not None else None
        self.waits: list[float] = []
        self.computes: list[float] = []

    def __iter__(self) -> Iterator[Any]:
        self.waits, self.computes = [], []
        iterator = iter(self.loader)
        handed_out: float | None = None
        while True:
            _synchronize(self.device)
            asked = time.perf_counter()
            if handed_out is not None:
                self.computes.append(asked - handed_out)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            handed_out = time.perf_counter()
            self.waits.append(handed_out - asked)
            yield batch

    def summary(self) -> WaitSummary:
        return WaitSummary(tuple(self.waits), tuple(self.computes))


def timed(loader: Iterable[Any], *, synchronize: torch.device | str | None = None) -> TimedLoader:
    """Wrap ``loader`` to record each iteration's data wait; see :class:`TimedLoader`."""
    return TimedLoader(loader, synchronize=synchronize)


# --- CPU and memory of this process and its workers ---------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        found = []
        for task in tasks:
            found += [int(c) for c in (task / "children").read_text().split()]
        return found
    except OSError:  # not Linux, or a process gone
        return []


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _rss_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def process_cpu(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds used so far by each of ``pids`` (Linux; empty elsewhere)."""
    return {pid: cpu for pid in pids if (cpu := _cpu_seconds(pid)) is not None}


def cpu_seconds_with_workers() -> float:
    """CPU seconds of this process, of its finished child processes and of the live ones
    (persistent DataLoader workers are only counted by ``getrusage`` once they exit)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(process_cpu(_children(os.getpid())).values())
    return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime + live


# --- the report -----------------------------------------------------------------------------------


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


@dataclass
class DiagnoseReport:
    """The three measurements, what follows from them, and what to do."""

    facts: Facts
    recommendations: list[str]
    memory_mb: float | None = None
    timeline: WaitSummary | None = field(default=None, repr=False)

    @property
    def predicted_speedup(self) -> float:
        """How much faster the loop would run if loading were free: the real loop's time
        per iteration over the step's on a cached batch (at least 1)."""
        if not self.facts.step_seconds:
            return 1.0
        return max(1.0, self.facts.loop_seconds / self.facts.step_seconds)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.facts),
            "predicted_speedup": self.predicted_speedup,
            "memory_mb": self.memory_mb,
            "recommendations": self.recommendations,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        f = self.facts
        rows = [
            [
                "training step on a cached batch",
                f"{1000 * f.step_seconds:.1f} ms" if f.step_seconds else "not measured",
            ],
            ["loader alone, per batch", f"{1000 * f.loader_seconds:.1f} ms"],
            ["real loop: waiting for data", f"{100 * f.wait_fraction:.1f}%"],
            ["speed-up if loading were free", f"{self.predicted_speedup:.2f}x"],
            [
                "workers (CPU busy each)",
                f"{f.num_workers} ({', '.join(f'{100 * b:.0f}%' for b in f.worker_busy) or '-'})",
            ],
            ["memory, process and workers", f"{self.memory_mb:.0f} MB" if self.memory_mb else "-"],
        ]
        advice = "\n".join(f"- {line}" for line in self.recommendations) or "- nothing to change"
        return f"{format_table(['measure', 'value'], rows)}\n\nRecommendations:\n{advice}"


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
    from fastload.prefetch import image_leaf_path

    path = image_leaf_path(batch)
    if path is None:
        return None
    for key in path:
        batch = batch[key]
    return batch


def diagnose(
    loader: Iterable[Any],
    step: Callable[[Any], Any] | None = None,
    *,
    batches: int = 50,
    warmup: int = 5,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> DiagnoseReport:
    """Measure whether data loading slows the loop ``for batch in loader: step(batch)``.

    1. ``step`` on one cached batch, ``batches`` times: the compute-bound time;
    2. the loader alone for ``batches`` batches (with the CPU use of each worker);
    3. the real loop for ``batches`` iterations: the fraction of time waiting for data.
    Each after ``warmup`` untimed iterations; timings are CUDA-synchronised on a GPU.

    Args:
        loader: A FastLoader, DataLoader, DataPrefetcher or any iterable of batches.
        step: Your training step, called with a batch; None measures the loader only.
        device: Where ``step`` runs (for synchronisation); default: CUDA if available.

    Returns:
        A :class:`DiagnoseReport`: print it, or ``to_dict()``/``to_json()`` it.
    """
    from tqdm import tqdm

    device = torch.device(device) if device is not None else default_device()
    bar = tqdm(total=3 * (batches + warmup), desc="diagnose", disable=not progress)
    step_seconds = 0.0
    if step is not None:
        cached = next(iter(loader))
        for index in range(warmup + batches):
            if index == warmup:
                _synchronize(device)
                start = time.perf_counter()
            step(cached)
            bar.update()
        _synchronize(device)
        step_seconds = (time.perf_counter() - start) / batches

    batches_alone = one_pass(loader, warmup + batches)
    for _ in range(warmup):
        next(batches_alone, None)
        bar.update()
    workers_before = process_cpu(_children(os.getpid()))
    wall_start, count = time.perf_counter(), 0
    for _batch in batches_alone:  # the clock runs from the end of the warm-up
        count += 1
        bar.update()
    elapsed = time.perf_counter() - wall_start
    loader_seconds = elapsed / max(count, 1)
    workers_after = process_cpu(_children(os.getpid()))
    busy = tuple(
        min(1.0, (workers_after[pid] - workers_before[pid]) / elapsed)
        for pid in sorted(workers_after)
        if pid in workers_before and elapsed > 0
    )

    loop = timed(_limited(loader, warmup + batches), synchronize=device)
    for batch in loop:
        if step is not None:
            step(batch)
        bar.update()
    bar.close()
    timeline = WaitSummary(tuple(loop.waits[warmup:]), tuple(loop.computes[warmup:]))
    wait_fraction = timeline.wait_fraction if step is not None else 1.0

    base = getattr(loader, "loader", loader)  # through a DataPrefetcher
    dataset = getattr(base, "dataset", None)
    storage, image_side = _storage(dataset) if dataset is not None else ("memory", None)
    sample = _image_tensor(cached) if step is not None else None
    memory = [_rss_bytes(pid) for pid in [os.getpid(), *_children(os.getpid())]]
    from fastload.prefetch import DataPrefetcher

    facts = Facts(
        step_seconds=step_seconds,
        loader_seconds=loader_seconds,
        wait_fraction=wait_fraction,
        loop_seconds=(timeline.wait_seconds + timeline.compute_seconds)
        / max(timeline.iterations, 1),
        batch_size=getattr(base, "batch_size", None),
        num_workers=getattr(base, "num_workers", 0),
        cpus=available_cpus(),
        cuda=device.type == "cuda",
        pin_memory=bool(getattr(base, "pin_memory", False)),
        prefetcher=isinstance(loader, DataPrefetcher),
        worker_busy=busy,
        storage=storage,
        image_side=image_side,
        batch_side=max(sample.shape[-2:]) if sample is not None and sample.dim() >= 3 else None,
    )
    total_memory = sum(m for m in memory if m is not None)
    return DiagnoseReport(
        facts, recommend(facts), total_memory / 2**20 if total_memory else None, timeline
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
        loss.backward()
        optimizer.step()

    return step
