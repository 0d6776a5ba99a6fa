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

import io
import itertools
import logging
import math
import os
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    get_worker_info,
)

__all__ = ["FastLoader", "auto_num_workers", "worker_candidates"]

T_co = TypeVar("T_co", covariant=True)

logger = logging.getLogger(__name__)

#: Upper bound of ``num_workers='auto'`` per training process. The folklore is 4 per GPU;
#: JPEG decoding and CPU augmentation for one modern GPU need more, and beyond 8 the
#: shared-memory traffic and start-up time usually cost more than they bring.
MAX_AUTO_WORKERS = 8

#: Batches buffered across all workers. With one or two workers a single slow batch
#: would otherwise stall the training loop.
MIN_BATCHES_IN_FLIGHT = 4


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity API
        return os.cpu_count() or 1


#: Below this much free /dev/shm, workers are not started by 'auto': batches travel from
#: workers through shared memory, and running out of it kills a worker with SIGBUS.
#: Docker gives containers 64 MiB unless told otherwise.
MIN_SHARED_MEMORY = 256 << 20


def _shared_memory_free() -> int | None:
    """Free bytes in /dev/shm, where worker batches go; None where there is none."""
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _small_shared_memory() -> str | None:
    """Why workers would crash for lack of shared memory, with the fix; else None."""
    free = _shared_memory_free()
    if free is None or free >= MIN_SHARED_MEMORY:
        return None
    return (
        f"only {free >> 20} MiB free in /dev/shm, and workers pass batches through it "
        "(running out kills them with a bus error); in Docker, run with --shm-size=8g or "
        "--ipc=host"
    )


def _local_world_size() -> int:
    """Training processes on this machine: torchrun's LOCAL_WORLD_SIZE, else 1."""
    if dist.is_available() and dist.is_initialized():
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return 1


def auto_num_workers(*, cpus: int | None = None, local_world_size: int | None = None) -> int:
    """The worker count FastLoader picks for ``num_workers='auto'`` on a disk-backed dataset.

    ``min(cpus // local_world_size, 8)``, at least 1: the CPUs this process may run on
    (``os.sched_getaffinity``, which respects taskset, cgroups and SLURM) shared among
    the training processes of this machine, capped at :data:`MAX_AUTO_WORKERS`.

    Example:
        >>> auto_num_workers(cpus=32, local_world_size=8)
        4
    """
    cpus = _available_cpus() if cpus is None else cpus
    local_world_size = _local_world_size() if local_world_size is None else local_world_size
    return max(1, min(cpus // max(1, local_world_size), MAX_AUTO_WORKERS))


class WorkerInit:
    """Worker start-up: seed ``random`` and NumPy from torch's per-worker seed, keep
    OpenCV and torch to one thread each (the workers already are the parallelism), then
    call the user's ``worker_init_fn``.

    torch's worker seed is ``base_seed + worker_id`` with ``base_seed`` drawn from the
    loader's ``generator`` at every epoch, so streams differ across workers and epochs
    and a seeded generator reproduces them. A class rather than a closure so that it
    pickles for the ``spawn`` start method.
    """

    def __init__(self, user_fn: Callable[[int], None] | None = None) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        seed = info.seed if info is not None else torch.initial_seed()
        random.seed(seed)
        np.random.seed(np.random.SeedSequence(seed).generate_state(1))
        torch.set_num_threads(1)
        import cv2  # late: the main process may never need OpenCV

        cv2.setNumThreads(0)
        if self.user_fn is not None:
            self.user_fn(worker_id)

    def __repr__(self) -> str:
        return f"WorkerInit(user_fn={self.user_fn!r})"


def _tensor_source(dataset: Dataset) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None] | None:
    """The tensors behind a TensorDataset, or a Subset of one (``random_split``), with
    the index map the Subsets apply; None for any other dataset."""
    index_map: torch.Tensor | None = None
    while isinstance(dataset, Subset):
        outer = torch.as_tensor(dataset.indices, dtype=torch.long)
        index_map = outer if index_map is None else outer[index_map]
        dataset = dataset.dataset
    if type(dataset) is TensorDataset:  # a subclass may override __getitem__
        return dataset.tensors, index_map
    return None


def _vectorised_order(sampler: Sampler) -> torch.Tensor | None:
    """One pass of a stock sampler as a tensor, drawn exactly as the sampler draws it.

    Covers ``SequentialSampler`` and ``RandomSampler`` without replacement (what
    ``shuffle=False/True`` create); None for any other sampler. The random draws mirror
    ``RandomSampler.__iter__`` call for call, so the generator ends in the same state and
    the next epoch matches too; tests/test_loader.py pins this against DataLoader.
    """
    if type(sampler) is SequentialSampler:
        return torch.arange(len(sampler))
    if type(sampler) is not RandomSampler or sampler.replacement:
        return None
    size = len(sampler.data_source)
    generator = sampler.generator
    if generator is None:
        generator = torch.Generator()
        generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
    whole, rest = divmod(sampler.num_samples, size)
    parts = [torch.randperm(size, generator=generator) for _ in range(whole)]
    parts.append(torch.randperm(size, generator=generator)[:rest])
    return torch.cat(parts)


class IndexBatches(Sampler[torch.Tensor]):
    """The batches of a :class:`~torch.utils.data.BatchSampler`, as index tensors.

    Same sampler, same batches, but assembled without a Python loop over the indices:
    a stock sampler's order is drawn as one tensor and split; any other sampler is
    drained by NumPy in C. For a batch of 8192 that is 0.1 ms (1.5 ms drained) instead
    of 3.5 ms, which matters when the fetch itself is one indexing operation.
    """

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.sampler = batch_sampler.sampler
        self.batch_size = batch_sampler.batch_size
        self.drop_last = batch_sampler.drop_last
        self._len = batch_sampler.__len__

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = _vectorised_order(self.sampler)
        if order is not None:
            batches = order.split(self.batch_size)
            if self.drop_last and batches and len(batches[-1]) < self.batch_size:
                batches = batches[:-1]
            yield from batches
            return
        indices = iter(self.sampler)  # may be endless: drain one batch at a time
        while True:
            batch = np.fromiter(itertools.islice(indices, self.batch_size), dtype=np.int64)
            if len(batch) == 0 or (self.drop_last and len(batch) < self.batch_size):
                return
            yield torch.from_numpy(batch)

    def __len__(self) -> int:
        return self._len()


class _StructurePickler(ForkingPickler):
    """Pickles a batch the way a worker sends it, minus the tensor and array data."""

    def persistent_id(self, obj: Any) -> str | None:
        return "data" if isinstance(obj, (torch.Tensor, np.ndarray)) else None


class UnsendableBatchError(TypeError):
    """A batch a worker cannot pickle, so it could never reach the main process."""


class _SendableBatch:
    """A worker's collate function that checks the batch can be sent to the main process.

    A batch that cannot be pickled (say a namedtuple defined inside a function) is lost
    by the worker's queue thread, and DataLoader then waits for it forever; this raises
    in the worker instead, where DataLoader hands the error to the training loop.
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        try:
            _StructurePickler(io.BytesIO()).dump(batch)
        except Exception as error:  # PicklingError, TypeError, AttributeError: all mean lost
            raise UnsendableBatchError(
                f"a worker cannot send its batch ({type(batch).__name__}) to the main process: "
                f"{error}; a type defined inside a function (a local namedtuple or class) "
                "cannot be pickled: define it at module level"
            ) from None
        return batch


def _passthrough_collate(batch: Any) -> Any:
    """Collate for batches that the dataset view already assembled."""
    return batch


def _describe(indices: Sequence[int] | int) -> str:
    if isinstance(indices, int):
        return f"index {indices}"
    shown = ", ".join(str(int(i)) for i in list(indices)[:8])
    more = f", ... ({len(indices)} in all)" if len(indices) > 8 else ""
    return f"indices [{shown}{more}]"


class DatasetView(Dataset):
    """What FastLoader hands to DataLoader in place of an in-memory tensor dataset: it
    fetches a whole batch with one indexing operation, and adds the failing indices to
    an exception (as a note, so the exception keeps its type). Other attributes are read
    from the wrapped dataset, so ``loader.dataset.tensors`` and ``len(loader.dataset)``
    work.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        source = _tensor_source(dataset)
        if source is None:
            raise TypeError(f"not an in-memory tensor dataset: {type(dataset).__name__}")
        self.tensors, self.index_map = source

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int] | torch.Tensor) -> Any:
        try:
            rows = torch.as_tensor(indices, dtype=torch.long)
            if self.index_map is not None:
                rows = self.index_map[rows]
            # index_select: a third faster than tensor[rows] for the same rows.
            return [tensor.index_select(0, rows) for tensor in self.tensors]
        except Exception as error:
            error.add_note(f"fastload: raised while loading dataset {_describe(indices)}")
            raise

    def __getattr__(self, name: str) -> Any:
        # Guard: during unpickling `dataset` is not set yet and lookups would recurse.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"DatasetView({self.dataset!r})"


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


def worker_candidates(cpus: int) -> list[int]:
    """Worker counts ``'tune'`` tries: 0, powers of two below ``cpus``, and ``cpus``."""
    counts = {0, cpus}
    count = 1
    while count < cpus:
        counts.add(count)
        count *= 2
    return sorted(counts)


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
            not iterable and collate_fn is None and collates and _tensor_source(dataset) is not None
        )
        view = DatasetView(dataset) if in_memory else dataset
        if in_memory:
            collate_fn = _passthrough_collate
            self.choices["fetch"] = "one indexing operation per batch (in-memory tensors)"

        chosen = num_workers in (_AUTO, _TUNE)  # FastLoader picks, not the caller
        if num_workers == _TUNE and not in_memory:
            num_workers, prefetch_factor = self._tune(
                view, batch_size, collate_fn, drop_last, pin_memory, worker_init_fn, prefetch_factor
            )
        elif chosen:
            num_workers = self._choose_num_workers(in_memory=in_memory, iterable=iterable)
        elif num_workers > 0:
            shortage = _small_shared_memory()  # the caller chose the workers: only say so
            if shortage is not None:
                warnings.warn(f"FastLoader with {num_workers} workers: {shortage}", stacklevel=2)
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
            self.choices["pin_memory"] = "CUDA available" if pin_memory else "no CUDA"
        if num_workers > 0:
            if persistent_workers is None:
                persistent_workers = True
                self.choices["persistent_workers"] = "workers kept across epochs"
            if prefetch_factor is None:
                prefetch_factor = max(2, math.ceil(MIN_BATCHES_IN_FLIGHT / num_workers))
                self.choices["prefetch_factor"] = (
                    f"{prefetch_factor * num_workers} batches in flight"
                )
        persistent_workers = bool(persistent_workers)

        self._auto_epoch = False
        self._epoch: int | None = None
        # Workers FastLoader chose are dropped if a batch could not travel from them.
        self._check_sendable = chosen and num_workers > 0 and not iterable
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
            num_workers=num_workers,
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
        self.collate_fn = _SendableBatch(collate_fn)
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
            _SendableBatch(self.collate_fn)([sample] if self._auto_collation else sample)
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
        shortage = _small_shared_memory()
        if shortage is not None:
            self.choices["num_workers"] = shortage
            warnings.warn(f"FastLoader uses no workers: {shortage}", stacklevel=3)
            return 0
        cpus, local = _available_cpus(), _local_world_size()
        workers = auto_num_workers(cpus=cpus, local_world_size=local)
        self.choices["num_workers"] = (
            f"{cpus} CPUs / {local} local process(es), at most {MAX_AUTO_WORKERS}"
        )
        return workers

    def _tune(
        self, view, batch_size, collate_fn, drop_last, pin_memory, worker_init_fn, prefetch_factor
    ):
        from fastload.bottleneck import tune_workers

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
            trial, workers=worker_candidates(_available_cpus()), prefetch=prefetch
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

    def __iter__(self) -> Iterator[Any]:
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
