"""FastLoader: a :class:`torch.utils.data.DataLoader` with defaults that keep a GPU fed.

Every DataLoader argument keeps its meaning and an argument the caller passes always
wins; FastLoader only fills in what was left unset:

* ``num_workers='auto'`` (see :func:`auto_num_workers`),
* ``pin_memory`` when CUDA is available,
* ``persistent_workers`` and ``prefetch_factor`` when there are workers,
* a worker init that seeds ``random``/NumPy, turns OpenCV threads off and then runs
  the caller's ``worker_init_fn``,
* whole-batch indexing for in-memory tensor datasets,
* a :class:`~torch.utils.data.DistributedSampler` under an initialised process group.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
)
from torch.utils.data.dataloader import _BaseDataLoaderIter

from fastload.loader.defaults import (
    MAX_AUTO_WORKERS,
    MIN_BATCHES_IN_FLIGHT,
    auto_num_workers,
    local_processes,
    small_shared_memory,
)
from fastload.loader.fetch import DatasetView, IndexBatches, passthrough_collate, tensor_source
from fastload.loader.workers import SendableBatch, UnsendableBatchError, WorkerInit
from fastload.system import available_cpus

__all__ = ["FastLoader"]


T_co = TypeVar("T_co", covariant=True)


logger = logging.getLogger(__name__)


_AUTO, _TUNE = "auto", "tune"


# DataLoader's own wording first: code that matches on it keeps working.
_NUM_WORKERS_ERROR = (
    "num_workers option should be non-negative; "
    "fastload takes a non-negative int, 'auto' or 'tune', got {!r}"
)


def _check_num_workers(num_workers: int | str) -> None:
    if isinstance(num_workers, str):
        if num_workers not in (_AUTO, _TUNE):
            raise ValueError(_NUM_WORKERS_ERROR.format(num_workers))
    elif isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(_NUM_WORKERS_ERROR.format(num_workers))


class FastLoader(DataLoader[T_co]):
    """A drop-in :class:`~torch.utils.data.DataLoader` with fast defaults.

    Arguments are DataLoader's, with the same meanings; the ones left as ``None`` (or
    ``'auto'``) are chosen by FastLoader, and ``repr(loader)`` and an INFO log line say
    what was chosen and why.

    Args:
        dataset: Any map-style or iterable dataset.
        num_workers: An int, or ``'auto'``: 0 for in-memory tensor datasets (one
            indexing operation per batch beats any worker), otherwise
            :func:`auto_num_workers`; or ``'tune'``: measure a few batches with each of
            :func:`worker_candidates` and prefetch factors 2 and 4, and keep the fastest
            (seconds to minutes at construction; seed 003 found fewer workers can win
            for small batches).
        pin_memory: Defaults to ``torch.cuda.is_available()``.
        persistent_workers: Defaults to True when there are workers.
        prefetch_factor: Batches per worker; defaults to enough for
            :data:`MIN_BATCHES_IN_FLIGHT` in all, and at least DataLoader's 2.
        worker_init_fn: Called after FastLoader's own worker set-up.
        sampler: Under an initialised ``torch.distributed`` process group and with no
            ``sampler`` or ``batch_sampler`` given, a ``DistributedSampler`` with
            ``shuffle`` and ``drop_last`` passed on; its epoch advances by itself at
            each new iteration unless you call ``set_epoch`` yourself.
        **kwargs: Any other DataLoader argument, passed through untouched.

    Example:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> data = TensorDataset(torch.arange(10.0), torch.arange(10))
        >>> loader = FastLoader(data, batch_size=4)
        >>> [y.tolist() for _, y in loader]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int | str = _AUTO,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        **kwargs: Any,
    ) -> None:
        _check_num_workers(num_workers)
        if isinstance(dataset, DatasetView):  # re-created by a framework from .dataset
            dataset = dataset.dataset
        self.choices: dict[str, str] = {}

        iterable = isinstance(dataset, IterableDataset)
        collates = batch_size is not None or batch_sampler is not None
        # The batched tensor fetch needs a view over the dataset; anything else is handed
        # to DataLoader as it is, so workers (get_worker_info().dataset) see the user's
        # own object.
        in_memory = (
            not iterable and collate_fn is None and collates and tensor_source(dataset) is not None
        )
        view = DatasetView(dataset) if in_memory else dataset
        if in_memory:
            collate_fn = passthrough_collate
            self.choices["fetch"] = "one indexing operation per batch (in-memory tensors)"

        chosen = isinstance(num_workers, str)  # 'auto' or 'tune': FastLoader picks, not the caller
        workers: int
        if num_workers == _TUNE and not in_memory:
            workers, prefetch_factor = self._tune(
                view, batch_size, collate_fn, drop_last, pin_memory, worker_init_fn, prefetch_factor
            )
        elif chosen:
            workers = self._choose_num_workers(in_memory=in_memory, iterable=iterable)
        else:
            workers = int(num_workers)
        if not chosen and workers > 0:
            shortage = small_shared_memory()  # the caller chose the workers: only say so
            if shortage is not None:
                warnings.warn(f"FastLoader with {workers} workers: {shortage}", stacklevel=2)
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
            self.choices["pin_memory"] = "CUDA available" if pin_memory else "no CUDA"
        if workers > 0:
            if persistent_workers is None:
                persistent_workers = True
                self.choices["persistent_workers"] = "workers kept across epochs"
            if prefetch_factor is None:
                prefetch_factor = max(2, math.ceil(MIN_BATCHES_IN_FLIGHT / workers))
                self.choices["prefetch_factor"] = f"{prefetch_factor * workers} batches in flight"
        persistent_workers = bool(persistent_workers)

        self._auto_epoch = False
        self._epoch: int | None = None
        # Workers FastLoader chose are dropped if a batch could not travel from them.
        self._check_sendable = chosen and workers > 0 and not iterable
        if sampler is None and batch_sampler is None and not iterable and _distributed():
            sampler = DistributedSampler(view, shuffle=bool(shuffle), drop_last=drop_last)
            shuffle = None
            self._auto_epoch = True
            self.choices["sampler"] = f"rank {sampler.rank} of {sampler.num_replicas}"

        super().__init__(
            view,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=WorkerInit(worker_init_fn),
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            **kwargs,
        )
        # Private hook of DataLoader (stable since torch 1.2): it reads batches of
        # indices from `_index_sampler`. Without the hook, the batches are still right.
        self._index_batches = (
            IndexBatches(self.batch_sampler)
            if in_memory and type(self.batch_sampler) is BatchSampler
            else None
        )
        if self.choices:
            logger.info("%s chose %s", type(self).__name__, self._describe_choices())

    def _get_iterator(self) -> Any:
        if self._check_sendable:
            self._check_sendable = False
            reason = self._unsendable_reason()
            if reason is not None:
                self.choices["num_workers"] = "batches cannot be sent from a worker"
                warnings.warn(f"FastLoader uses no workers: {reason}", stacklevel=3)
                self.num_workers = 0
        # The workers get a collate that checks each batch can be sent; the attribute
        # users and frameworks read stays what they gave (or DataLoader's default).
        if self.num_workers == 0:
            return super()._get_iterator()
        collate_fn = self.collate_fn
        self.collate_fn = SendableBatch(collate_fn)
        try:
            return super()._get_iterator()
        finally:
            self.collate_fn = collate_fn

    def _unsendable_reason(self) -> str | None:
        """Why a batch of the first sample could not travel from a worker (a class defined
        in a function, say), or None when it can or cannot be told. DataLoader, with no
        workers by default, never has to send it."""
        try:
            sample = self.dataset[0]
            SendableBatch(self.collate_fn)([sample] if self._auto_collation else sample)
        except UnsendableBatchError as error:
            return str(error)
        except Exception:  # an empty or failing dataset: its own error comes in the loop
            return None
        return None

    @property
    def _index_sampler(self) -> Any:
        if self._index_batches is not None:
            return self._index_batches
        return super()._index_sampler

    def _choose_num_workers(self, *, in_memory: bool, iterable: bool) -> int:
        if in_memory:
            self.choices["num_workers"] = "in-memory tensors are indexed a batch at a time"
            return 0
        if iterable:
            # Each worker iterates its own copy: unless the dataset splits itself with
            # get_worker_info(), every sample would come once per worker.
            self.choices["num_workers"] = (
                "an IterableDataset is copied into every worker; pass num_workers=N if it "
                "shards itself by get_worker_info()"
            )
            return 0
        shortage = small_shared_memory()
        if shortage is not None:
            self.choices["num_workers"] = shortage
            warnings.warn(f"FastLoader uses no workers: {shortage}", stacklevel=3)
            return 0
        cpus, local = available_cpus(), local_processes()
        workers = auto_num_workers(cpus=cpus, local_world_size=local)
        self.choices["num_workers"] = (
            f"{cpus} CPUs / {local} local process(es), at most {MAX_AUTO_WORKERS}"
        )
        return workers

    def _tune(
        self, view, batch_size, collate_fn, drop_last, pin_memory, worker_init_fn, prefetch_factor
    ):
        from fastload.loader.tuning import tune_workers, worker_candidates

        def trial(workers: int, prefetch: int) -> DataLoader:
            return DataLoader(
                view,
                batch_size=batch_size,
                num_workers=workers,
                collate_fn=collate_fn,
                pin_memory=bool(pin_memory) and torch.cuda.is_available(),
                drop_last=drop_last,
                worker_init_fn=WorkerInit(worker_init_fn),
                prefetch_factor=prefetch if workers else None,
            )

        prefetch = (prefetch_factor,) if prefetch_factor is not None else (2, 4)
        workers, best_prefetch, curve = tune_workers(
            trial, workers=worker_candidates(available_cpus()), prefetch=prefetch
        )
        measured = ", ".join(f"{w}w/{p}: {rate:.1f}" for (w, p), rate in sorted(curve.items()))
        self.choices["num_workers"] = f"tuned, batches/s {measured}"
        if workers:
            self.choices["prefetch_factor"] = "tuned with num_workers"
        return workers, (best_prefetch if workers else None)

    def _describe_choices(self) -> str:
        values = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "prefetch_factor": self.prefetch_factor,
            "sampler": type(self.sampler).__name__,
            "fetch": "batched",
        }
        return ", ".join(f"{name}={values[name]} ({why})" for name, why in self.choices.items())

    def __iter__(self) -> _BaseDataLoaderIter:
        if self._auto_epoch:
            self._advance_epoch()
        return super().__iter__()

    def _advance_epoch(self) -> None:
        # A user who calls set_epoch() themselves keeps control: the epoch only moves on
        # while the sampler still holds the value it had at the previous iteration.
        sampler: DistributedSampler = self.sampler  # type: ignore[assignment]
        if self._epoch is None:
            self._epoch = sampler.epoch
        elif sampler.epoch != self._epoch:
            self._auto_epoch = False
        else:
            self._epoch += 1
            sampler.set_epoch(self._epoch)

    def __repr__(self) -> str:
        dataset = self.dataset.dataset if isinstance(self.dataset, DatasetView) else self.dataset
        fields = {
            "dataset": type(dataset).__name__,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "prefetch_factor": self.prefetch_factor,
            "sampler": type(self.sampler).__name__,
            "drop_last": self.drop_last,
            "batched_fetch": isinstance(self.dataset, DatasetView),
        }
        body = ", ".join(f"{key}={value}" for key, value in fields.items())
        why = f"\n  chosen: {self._describe_choices()}" if self.choices else ""
        return f"{type(self).__name__}({body}){why}"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()
