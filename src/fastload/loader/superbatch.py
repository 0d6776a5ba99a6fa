"""Super-batches: a worker loads a run of consecutive batches as one message, and the
loader's iterator hands them out one batch at a time.

What a worker pays to send a batch hardly depends on its size: a pickled message, and a
shared-memory segment and a file descriptor per tensor; small batches pay it every few
samples. A :class:`Group` is a run of consecutive batches of the epoch's order, made by
the loader's iterator after a resume's skip (so a resume still starts at any batch). A
worker loads each of its batches as it would load that batch alone (the same
``__getitems__`` calls, the same keyed seeds, a failure naming the same sample), and
collates them into one :class:`SuperBatch` by the group's :class:`Mode`. A batch that
fails ends its group: the batches before it are handed out, then its error raised, as
DataLoader would.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from fastload.typed_torch import exception_wrapper, pin_memory

__all__ = [
    "GROUP_SAMPLES",
    "Group",
    "Grouping",
    "Mode",
    "RunPart",
    "SuperBatch",
    "fetch_group",
    "plan_super_batches",
]

#: Samples a super-batch gathers (whole batches, at least this many where the epoch has
#: them): enough that the per-message cost is shared as at a batch size of 64.
GROUP_SAMPLES = 64

_END = object()


class Mode(enum.Enum):
    """How a worker collates a group."""

    EACH = "each"  # the user's collate_fn on each batch, as DataLoader calls it
    WHOLE = "whole"  # torch's default_collate once (one buffer per field), cut in the loader
    ROWS = "rows"  # in-memory tensors: one indexing operation for the group, cut likewise


@dataclass(frozen=True)
class Group:
    """Consecutive batches of indices, sent to a worker in place of one batch."""

    batches: list[Any]
    mode: Mode


@dataclass(frozen=True)
class Grouping:
    """How a loader's iterator groups its batches: runs of ``samples`` samples or more;
    with ``batch_size`` (every batch but the last that size), ``ceil(samples /
    batch_size)`` batches, counted without measuring each."""

    mode: Mode
    batch_size: int | None = None
    samples: int = GROUP_SAMPLES

    def take(self, first: Any, batches: Iterator[Any]) -> Any:
        """``first`` alone where it fills a group, else a :class:`Group` of it and the
        batches after it, drawn from ``batches``, up to :attr:`samples` samples."""
        size = self.batch_size or len(first)
        group = [first]
        while size < self.samples:
            batch: Any = next(batches, _END)
            if batch is _END:
                break
            group.append(batch)
            size += self.batch_size or len(batch)
        return first if len(group) == 1 else Group(group, self.mode)


@dataclass
class SuperBatch:
    """A group's batches as a worker sends them: ``batches`` collated one by one, or
    ``whole`` collated at once with the ``sizes`` and ``layout`` to cut it by; then
    ``error``, the failure of the batch after them, raised once they are handed out."""

    batches: list[Any] = field(default_factory=list)
    whole: Any = None
    sizes: tuple[int, ...] = ()
    layout: Any = None
    error: BaseException | ExceptionWrapper | None = None

    def unpack(self) -> list[Any]:
        """The user's batches, in order (views of ``whole`` where it was collated once)."""
        if self.layout is None:
            return self.batches
        return self.cut(self.whole)

    def cut(self, whole: Any) -> list[Any]:
        """``whole`` (this super-batch's ``whole``, or a copy of it elsewhere, such as on
        the GPU) cut into the user's batches as :meth:`unpack` cuts it."""
        return _split(whole, self.layout, self.sizes)

    def pin_memory(self) -> SuperBatch:
        """A copy in pinned memory, one pinned buffer per field of ``whole``: what
        DataLoader's ``pin_memory`` thread calls."""
        batches = [pin_memory(batch) for batch in self.batches]
        whole = pin_memory(self.whole)
        return SuperBatch(batches, whole, self.sizes, self.layout, self.error)


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

    collate_fn: Callable[[Any], Any]

    def load(self, possibly_batched_index: Any) -> Any:
        """A batch's samples, uncollated, a failure naming its sample."""


def fetch_group(fetcher: BatchFetch, group: Group) -> SuperBatch:
    """The group's batches, each holding what DataLoader would have built for it."""
    if group.mode is Mode.ROWS:
        # A failure is loaded again batch by batch below, to be raised at its own batch.
        with contextlib.suppress(Exception):
            return _fetch_rows(fetcher, group)
    loaded: list[Any] = []
    failure: BaseException | None = None
    for batch in group.batches:
        try:
            loaded.append(fetcher.load(batch))
        except Exception as error:
            failure = error
            break
    if failure is None and group.mode is Mode.WHOLE:
        whole = _collate_whole(fetcher.collate_fn, loaded)
        if whole is not None:
            return whole
    batches = []
    for samples in loaded:
        try:
            batches.append(fetcher.collate_fn(samples))
        except Exception as error:
            failure = error
            break
    if failure is not None and not batches:
        raise failure  # the group's first batch: raised as DataLoader raises it
    return SuperBatch(batches, error=None if failure is None else _carried(failure))


def _fetch_rows(fetcher: BatchFetch, group: Group) -> SuperBatch:
    parts = [torch.as_tensor(batch, dtype=torch.long) for batch in group.batches]
    whole = fetcher.collate_fn(fetcher.load(torch.cat(parts)))
    layout = ("seq", tuple(("tensor",) for _ in whole))
    return SuperBatch(whole=whole, sizes=tuple(part.shape[0] for part in parts), layout=layout)


def _collate_whole(collate_fn: Callable[[Any], Any], loaded: list[Any]) -> SuperBatch | None:
    """The group collated at once, where cutting it gives each batch's own collate: every
    sample alike (:func:`_layout`); None otherwise, or where collating it fails."""
    if not all(type(samples) is list for samples in loaded):
        return None
    samples = [sample for batch in loaded for sample in batch]
    layout = _layout(samples[0])
    if layout is None or any(_layout(sample) != layout for sample in samples[1:]):
        return None
    try:
        whole = collate_fn(samples)
    except Exception:
        return None  # each batch's own collate raises it, at its batch
    return SuperBatch(whole=whole, sizes=tuple(len(b) for b in loaded), layout=layout)


def _carried(error: BaseException) -> BaseException | ExceptionWrapper:
    """A failure to raise after the batches before it: in a worker, wrapped as DataLoader's
    worker loop wraps it (the exception itself may not pickle)."""
    info = get_worker_info()
    if info is None:
        return error
    where = f"in DataLoader worker process {info.id}"
    return exception_wrapper((type(error), error, error.__traceback__), where=where)


def plan_super_batches(
    requested: bool | None, loader: DataLoader[Any], *, in_memory: bool
) -> tuple[Grouping | None, dict[str, str]]:
    """Whether ``loader`` sends super-batches (the grouping, or None) and, where the
    caller left ``requested`` as None, why (``{"super_batches": reason}``, else ``{}``).

    Raises:
        ValueError: ``requested`` is True where super-batches cannot apply.
    """
    refusal = None
    if isinstance(loader.dataset, IterableDataset):
        refusal = "an IterableDataset batches its own samples in each worker"
    elif not loader._auto_collation:
        refusal = "batch_size=None: samples are not batched"
    if refusal is not None:
        if requested:
            raise ValueError(f"super_batches=True cannot apply: {refusal}")
        return None, {} if requested is False else {"super_batches": refusal}
    if requested is False:
        return None, {}
    mode = Mode.EACH
    if in_memory:
        mode = Mode.ROWS
    elif loader.collate_fn is default_collate:
        mode = Mode.WHOLE
    grouping = Grouping(mode, loader.batch_size)
    if requested:
        return grouping, {}
    carried = "an indexing operation" if in_memory else "a message"
    why = f"about {GROUP_SAMPLES} samples {carried}; super_batches=False: off"
    if loader.batch_size is not None and loader.batch_size >= GROUP_SAMPLES:
        why = f"batches of {GROUP_SAMPLES} samples or more go one by one"
    elif loader.num_workers == 0 and not in_memory:
        why = "no workers: each batch is loaded when it is asked for"
    else:
        return grouping, {"super_batches": why}
    return None, {"super_batches": why}
