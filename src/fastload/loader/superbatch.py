"""Super-batches: a worker loads several batches as one message, and the loader's
iterator hands them out one batch at a time, exactly as DataLoader would have.

What a worker pays to send a batch hardly depends on its size: a pickled message, and a
shared-memory segment and a file descriptor per tensor; small batches pay it every few
samples. The loader's iterator deals the epoch's batches in *rounds*: a round is enough
batches that each worker gets about :data:`GROUP_SAMPLES` samples, and batch ``k`` of the
round goes to the :class:`Group` of worker ``k % workers``, as DataLoader deals one batch
at a time. So each worker loads the very batches DataLoader would have sent it, in the
same order (its ``get_worker_info()``, its seeds and any randomness it draws are the
same); only the messages are fewer. A worker loads each batch of its group as it would
load that batch alone (the same ``__getitems__`` calls, the same keyed seeds) and sends
a :class:`SuperBatch`: each batch collated by the group's :class:`Mode`, or its failure
(:class:`BatchFailure`), which travels with it and is raised when that batch is handed
out. The loader's iterator puts a round's batches back in their order.
"""

from __future__ import annotations

import enum
import itertools
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import numpy as np
import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from fastload.typed_torch import exception_wrapper, pin_memory, reraise

__all__ = [
    "GROUP_SAMPLES",
    "BatchFailure",
    "Group",
    "Grouping",
    "Mode",
    "RunPart",
    "SuperBatch",
    "fetch_group",
    "group_mode",
    "interleave",
    "plan_super_batches",
]

#: Samples a worker's group gathers (whole batches, at least this many where the epoch
#: has them): enough that the per-message cost is shared as at a batch size of 64.
GROUP_SAMPLES = 64

_END = object()


class Mode(enum.Enum):
    """How a worker collates a group."""

    EACH = "each"  # the loader's collate_fn on each batch, as DataLoader calls it
    WHOLE = "whole"  # torch's default_collate once (one buffer per field), cut in the loader
    ROWS = "rows"  # in-memory tensors: one indexing operation for the group, cut likewise


@dataclass
class BatchFailure:
    """A batch's failure, in its place among the batches: from the main process, the
    exception itself; from a worker, wrapped as DataLoader's worker loop wraps it (the
    exception itself may not pickle). Raised once."""

    error: BaseException | ExceptionWrapper | None

    def raise_it(self) -> NoReturn:
        """Raise the failure, letting go of it: its traceback holds the frames it passes
        (the loader's iterator's among them), and a frame or failure holding it would be
        a cycle that keeps the iterator, and its persistent workers, alive until the
        garbage collector runs."""
        error, self.error = self.error, None
        try:
            if isinstance(error, BaseException):
                raise error
            assert error is not None
            try:
                reraise(error)
            except BaseException as rebuilt:
                # torch's reraise() frame holds the exception it raises: cleared, so that
                # no cycle keeps it, and the loader's iterator in this traceback, alive
                traceback.clear_frames(rebuilt.__traceback__)
                raise
            raise AssertionError("unreachable: reraise() raises")
        finally:
            error = None


@dataclass(frozen=True)
class Group:
    """The batches of a round one worker loads: the round's batches ``k``, ``k + of``,
    ``k + 2 * of``, ... for the ``k``-th of the ``of`` groups dealt in that round."""

    batches: list[Any]
    mode: Mode
    of: int = 1


@dataclass(frozen=True)
class Grouping:
    """How a loader's iterator deals its batches to ``workers`` workers (1 without
    workers): rounds in which each group holds ``samples`` samples or more; with
    ``batch_size`` (every batch but the last that size) the batches are counted without
    measuring each."""

    mode: Mode
    batch_size: int | None = None
    workers: int = 1
    samples: int = GROUP_SAMPLES

    def deal(self, batches: Iterator[Any]) -> list[Group]:
        """The next round's groups, drawn from ``batches``: batch ``k`` of the round to
        group ``k % workers``, as DataLoader sends batch ``k`` to worker ``k % workers``
        (a round is a whole number of turns of the workers, so the next one starts at
        worker 0 again). Fewer groups than workers where the epoch has fewer batches left.

        Raises:
            StopIteration: ``batches`` has none left.
        """
        drawn: list[Any] = []
        filled = [0] * self.workers
        while min(filled) < self.samples or len(drawn) % self.workers:
            batch: Any = next(batches, _END)
            if batch is _END:
                break
            # an empty batch still counts one: a round always ends
            filled[len(drawn) % self.workers] += self.batch_size or max(len(batch), 1)
            drawn.append(batch)
        if not drawn:
            raise StopIteration
        groups = min(self.workers, len(drawn))
        return [Group(drawn[slot :: self.workers], self.mode, groups) for slot in range(groups)]


@dataclass
class SuperBatch:
    """A group's batches as a worker sends them: ``batches`` collated one by one (a
    :class:`BatchFailure` in a batch's place where it failed), or ``whole`` collated at
    once with the ``sizes`` and ``layout`` to cut it by; ``of``: the groups in its round."""

    batches: list[Any] = field(default_factory=list)
    whole: Any = None
    sizes: tuple[int, ...] = ()
    layout: Any = None
    of: int = 1

    def unpack(self) -> list[Any]:
        """The group's batches, in order (views of ``whole`` where it was collated once)."""
        if self.layout is None:
            return self.batches
        return self.cut(self.whole)

    def parts(self) -> list[tuple[Any, RunPart | None]]:
        """Each batch with the :class:`RunPart` it is of ``whole`` (None where the batches
        were collated one by one)."""
        whole = self.layout is not None
        return [
            (batch, RunPart(self, index) if whole else None)
            for index, batch in enumerate(self.unpack())
        ]

    def cut(self, whole: Any) -> list[Any]:
        """``whole`` (this super-batch's ``whole``, or a copy of it elsewhere, such as on
        the GPU) cut into the batches as :meth:`unpack` cuts it."""
        return _split(whole, self.layout, self.sizes)

    def pin_memory(self) -> SuperBatch:
        """A copy in pinned memory, one pinned buffer per field of ``whole``: what
        DataLoader's ``pin_memory`` thread calls."""
        batches = [pin_memory(batch) for batch in self.batches]
        whole = pin_memory(self.whole)
        return SuperBatch(batches, whole, self.sizes, self.layout, self.of)


def interleave(round_: Sequence[SuperBatch]) -> Iterator[tuple[Any, RunPart | None]]:
    """A round's batches in the order they were drawn, from its groups' super-batches
    (in the order sent): the first batch of each group, then the second of each, ..."""
    columns = itertools.zip_longest(*(part.parts() for part in round_), fillvalue=_END)
    return (item for column in columns for item in column if item is not _END)


@dataclass(frozen=True)
class RunPart:
    """A batch the loader handed out as batch ``index`` of a super-batch collated at once
    (``run.whole``): a consumer may copy the run once and cut it (:meth:`SuperBatch.cut`)."""

    run: SuperBatch
    index: int

    @property
    def last(self) -> bool:
        """Whether it is the run's last batch."""
        return self.index == len(self.run.sizes) - 1


def _split(value: Any, layout: Any, sizes: tuple[int, ...]) -> list[Any]:
    """What ``default_collate`` gives for each run of ``sizes`` samples of those that gave
    ``value``: leaves split (tensors, one ``split`` each; lists of strings), containers
    rebuilt as it builds them (a dict; a namedtuple of its type; a list for a list or a
    tuple)."""
    kind = layout[0]
    if kind in ("dict", "named", "seq"):
        items = value.values() if kind == "dict" else value
        columns = [
            _split(item, inner, sizes) for item, inner in zip(items, layout[-1], strict=True)
        ]
        rows = list(zip(*columns, strict=True)) if columns else [()] * len(sizes)
        if kind == "dict":
            return [dict(zip(value, row, strict=True)) for row in rows]
        return [type(value)(*row) if kind == "named" else list(row) for row in rows]
    if isinstance(value, torch.Tensor):
        return list(torch.split(value, list(sizes)))
    starts = list(itertools.accumulate(sizes, initial=0))
    return [value[start:stop] for start, stop in itertools.pairwise(starts)]


def _layout(sample: Any) -> Any:
    """What ``default_collate`` makes of ``sample``, as a hashable description (types,
    dtypes and shapes included); None where collating a group at once and cutting it
    might not give each batch's own collate (another type, an array of strings)."""
    kind = type(sample)
    if kind is torch.Tensor:
        plain = sample.layout == torch.strided and not sample.is_nested
        return ("tensor", sample.dtype, sample.shape, sample.device) if plain else None
    if kind is np.ndarray:
        return ("array", sample.dtype.str, sample.shape) if sample.dtype.kind in "biufc" else None
    if kind in (int, float, bool, str, bytes) or isinstance(sample, (np.number, np.bool_)):
        return ("scalar", kind)
    if kind is dict:
        inner = tuple(_layout(value) for value in sample.values())
        return None if None in inner else ("dict", tuple(sample), inner)
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        named = tuple(_layout(value) for value in sample)
        return None if None in named else ("named", kind, named)
    if kind in (list, tuple):
        items = tuple(_layout(value) for value in sample)
        return None if None in items else ("seq", items)
    return None


class BatchFetch(Protocol):
    """The fetcher a worker (or the main process) loads batches with (``NamingFetcher``)."""

    dataset: Any
    collate_fn: Callable[[Any], Any]

    def load(self, possibly_batched_index: Any) -> Any:
        """A batch's samples, uncollated, a failure naming its sample."""

    def fetch_one(self, possibly_batched_index: Any) -> Any:
        """A batch loaded and collated, as DataLoader's fetch makes it."""


class RowSource(Protocol):
    """In-memory tensors fetched by rows (``fastload.loader.fetch.DatasetView``)."""

    def rows(self, indices: Any) -> torch.Tensor | None:
        """The source rows of a batch, or None where only the plain fetch gives its result."""

    def take(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """The tensors' ``rows``, one indexing operation each."""


def fetch_group(fetcher: BatchFetch, group: Group) -> SuperBatch:
    """The group's batches, each holding what DataLoader would have built for it, or the
    failure DataLoader would have raised for it."""
    if group.mode is Mode.ROWS:
        rows = _fetch_rows(fetcher.dataset, group)
        if rows is not None:
            return rows
    if group.mode is Mode.EACH:  # loaded and collated batch by batch, as DataLoader calls both
        batches = [_attempt(fetcher.fetch_one, batch) for batch in group.batches]
        return SuperBatch(batches, of=group.of)
    loaded = [_attempt(fetcher.load, batch) for batch in group.batches]
    whole = _collate_whole(fetcher.collate_fn, loaded, group)  # (default_collate draws nothing)
    if whole is not None:
        return whole
    batches = [
        samples if isinstance(samples, BatchFailure) else _attempt(fetcher.collate_fn, samples)
        for samples in loaded
    ]
    return SuperBatch(batches, of=group.of)


def _attempt(step: Callable[[Any], Any], value: Any) -> Any:
    """``step(value)``, or its failure, to be raised at its batch."""
    try:
        return step(value)
    except StopIteration:
        raise
    except Exception as error:
        return BatchFailure(_carried(error))


def _fetch_rows(view: RowSource, group: Group) -> SuperBatch | None:
    """The group by one indexing operation, where every batch is rows the fast path
    reads exactly (else None: each batch goes its own way)."""
    rows = [view.rows(batch) for batch in group.batches]
    if any(part is None for part in rows):
        return None
    whole = view.take(torch.cat(rows))  # type: ignore[arg-type]
    layout = ("seq", tuple(("tensor",) for _ in whole))
    sizes = tuple(part.shape[0] for part in rows)  # type: ignore[union-attr]
    return SuperBatch(whole=whole, sizes=sizes, layout=layout, of=group.of)


def _collate_whole(
    collate_fn: Callable[[Any], Any], loaded: list[Any], group: Group
) -> SuperBatch | None:
    """The group collated at once, where cutting it gives each batch's own collate: no
    batch failed or is empty, every sample alike (:func:`_layout`); None otherwise, or
    where collating it fails."""
    if not all(type(samples) is list and samples for samples in loaded):
        return None
    samples = [sample for batch in loaded for sample in batch]
    layout = _layout(samples[0])
    if layout is None or any(_layout(sample) != layout for sample in samples[1:]):
        return None
    try:
        whole = collate_fn(samples)
    except Exception:
        return None  # each batch's own collate raises it, at its batch
    sizes = tuple(len(batch) for batch in loaded)
    return SuperBatch(whole=whole, sizes=sizes, layout=layout, of=group.of)


def _carried(error: BaseException) -> BaseException | ExceptionWrapper:
    """A failure to raise at its batch: in a worker, wrapped as DataLoader's worker loop
    wraps it."""
    info = get_worker_info()
    if info is None:
        return error
    where = f"in DataLoader worker process {info.id}"
    return exception_wrapper((type(error), error, error.__traceback__), where=where)


def group_mode(loader: DataLoader[Any], *, in_memory: bool) -> Mode:
    """How ``loader``'s workers collate a group, with its collate as it is now."""
    if in_memory:
        return Mode.ROWS
    return Mode.WHOLE if loader.collate_fn is default_collate else Mode.EACH


def plan_super_batches(
    requested: bool | None, loader: DataLoader[Any], *, in_memory: bool
) -> tuple[Grouping | None, dict[str, str]]:
    """Whether ``loader`` sends super-batches (the grouping, or None) and, where the
    caller left ``requested`` as None, why (``{"super_batches": reason}``, else ``{}``).

    Raises:
        TypeError: ``requested`` is not True, False or None.
        ValueError: ``requested`` is True where super-batches cannot apply.
    """
    if requested is not None and not isinstance(requested, bool):
        raise TypeError(f"super_batches must be True, False or None, got {requested!r}")
    refusal = None
    if isinstance(loader.dataset, IterableDataset):
        refusal = "an IterableDataset batches its own samples in each worker"
    elif not loader._auto_collation:
        refusal = "batch_size=None: samples are not batched"
    elif getattr(loader, "in_order", True) is False:
        refusal = "in_order=False: each batch is handed out as soon as its worker has it"
    if refusal is not None:
        if requested:
            raise ValueError(f"super_batches=True cannot apply: {refusal}")
        return None, {} if requested is False else {"super_batches": refusal}
    if requested is False:
        return None, {}
    grouping = Grouping(group_mode(loader, in_memory=in_memory), loader.batch_size)
    if requested:
        return grouping, {}
    carried = "an indexing operation" if in_memory else "a message"
    why = f"about {GROUP_SAMPLES} samples {carried}; super_batches=False: off"
    if loader.batch_size is not None and loader.batch_size >= GROUP_SAMPLES:
        why = f"batches of {GROUP_SAMPLES} samples or more go one by one"
    elif loader.num_workers == 0:  # DataLoader loads no batch ahead in the main process
        why = "no workers: each batch is loaded when it is asked for"
    else:
        return grouping, {"super_batches": why}
    return None, {"super_batches": why}
