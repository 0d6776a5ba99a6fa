"""FastLoader: a :class:`torch.utils.data.DataLoader` with defaults that keep a GPU fed.

Every DataLoader argument keeps its meaning and an argument the caller passes always
wins; FastLoader only fills in what was left unset:

* ``num_workers='auto'`` (see :func:`auto_num_workers`),
* ``pin_memory`` when CUDA is available,
* ``persistent_workers`` and ``prefetch_factor`` when there are workers,
* a worker init that seeds ``random``/NumPy, turns OpenCV threads off and then runs
  the caller's ``worker_init_fn``,
* whole-batch indexing for in-memory tensor datasets,
* a :class:`~torch.utils.data.DistributedSampler` under an initialised process group,

and adds what DataLoader lacks: ``state_dict()``/``load_state_dict()`` to resume an
epoch exactly where a checkpoint left it, and ``seed=`` for randomness keyed by sample.
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
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

from fastload.loader.defaults import (
    MAX_AUTO_WORKERS,
    MIN_BATCHES_IN_FLIGHT,
    auto_num_workers,
    local_processes,
    small_shared_memory,
)
from fastload.loader.errors import NamingFetcher
from fastload.loader.fetch import DatasetView, IndexBatches, passthrough_collate, tensor_source
from fastload.loader.state import (
    EpochProgress,
    ResumableBatches,
    RNGSnapshot,
    SeededSamples,
    keyed_seeds,
)
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
        seed: Randomness keyed by sample: each sample is loaded (in whichever worker)
            with Python's, NumPy's and torch's generators seeded from ``(seed, epoch,
            index)``, and ``DataPrefetcher``'s ``fastload.gpu`` transform draws each
            sample's parameters from the same key. The same epoch is then the same,
            batch for batch, whatever ``num_workers``. Also seeds the order (the
            ``generator``, when none is given) and an automatic DistributedSampler.
        **kwargs: Any other DataLoader argument, passed through untouched.

    Checkpoints: ``state_dict()`` is small plain data (ints, bytes of generator states)
    to save beside the model; ``load_state_dict(state)`` makes the next epoch pick up
    exactly after the batches already trained on (same samples, same order, and with
    ``seed`` the same augmentation draws), without loading the ones skipped.

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
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        _check_num_workers(num_workers)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
                raise ValueError(f"seed must be an int in 0 .. 2**63 - 1, got {seed!r}")
            if kwargs.get("in_order") is False:
                raise ValueError("seed needs in_order=True: a batch's seeds follow its order")
            if generator is None:
                generator = torch.Generator().manual_seed(seed)
        if isinstance(dataset, (DatasetView, SeededSamples)):  # re-created from .dataset
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
        keyed = seed is not None and not iterable and not in_memory
        view: Dataset = dataset
        if in_memory:
            view = DatasetView(dataset)
        elif keyed:
            view = SeededSamples(dataset, seed)  # type: ignore[arg-type]
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
            sampler = DistributedSampler(
                view, shuffle=bool(shuffle), drop_last=drop_last, seed=seed or 0
            )
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
        self.seed = seed
        self._epochs_started = 0
        self._progress: EpochProgress | None = None  # the epoch under way, or the last
        self._resume: EpochProgress | None = None  # load_state_dict's, for the next epoch
        self._resumable = (
            None
            if iterable
            else ResumableBatches(
                self._index_batches or DataLoader._index_sampler.fget(self),  # type: ignore[attr-defined]
                keyed=keyed,
            )
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
            return self._new_iterator()
        collate_fn = self.collate_fn
        self.collate_fn = SendableBatch(collate_fn)
        try:
            return self._new_iterator()
        finally:
            self.collate_fn = collate_fn

    def _new_iterator(self) -> _BaseDataLoaderIter:
        """DataLoader's iterator, one that also counts for ``state_dict`` the batches it
        hands out (it holds no reference to the loader, as DataLoader's does not)."""
        if self._resumable is None:
            return super()._get_iterator()
        if self.num_workers == 0:
            return _CountingSingleProcessIter(self)
        self.check_worker_number_rationality()
        return _CountingMultiProcessingIter(self)

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
        resumable = self.__dict__.get("_resumable")
        if resumable is not None:
            return resumable
        if self.__dict__.get("_index_batches") is not None:
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
        if self._resumable is not None:
            self._start_epoch()
        return super().__iter__()

    # --- checkpoints -----------------------------------------------------------------------------

    def _next_iterator_is_fresh(self) -> bool:
        """Whether the next ``iter()`` makes a new DataLoader iterator (which draws the
        workers' base seed) rather than resetting the persistent one."""
        return self._iterator is None or not (self.persistent_workers and self.num_workers > 0)

    def _start_epoch(self) -> None:
        if self._resume is not None:
            self._progress, self._resume = self._resume, None
        else:
            snapshot = RNGSnapshot.take(
                self._order_generators(), base_draw=self._next_iterator_is_fresh()
            )
            self._progress = EpochProgress(self._epochs_started, snapshot)
        self._epochs_started = self._progress.epoch + 1
        self._progress.key_epoch = self._key_epoch()
        self._progress.generators = self._order_generators()
        self._progress.base = self.generator
        self._resumable.progress = self._progress  # type: ignore[union-attr]

    def _order_generators(self) -> dict[str, torch.Generator]:
        """The loader's and its samplers' own generators, each once."""
        found: dict[str, torch.Generator] = {}
        owners = (
            ("loader", self),
            ("sampler", self.sampler),
            ("batch_sampler", getattr(self.batch_sampler, "sampler", None)),
        )
        for name, owner in owners:
            generator = getattr(owner, "generator", None)
            if isinstance(generator, torch.Generator) and all(
                generator is not other for other in found.values()
            ):
                found[name] = generator
        return found

    def _samplers_with_epochs(self) -> dict[str, Any]:
        return {
            name: owner
            for name, owner in (("sampler", self.sampler), ("batch_sampler", self.batch_sampler))
            if isinstance(getattr(owner, "epoch", None), int) and hasattr(owner, "set_epoch")
        }

    def _key_epoch(self) -> int:
        """The epoch in a sample's key: its sampler's (set_epoch) where it has one."""
        for owner in self._samplers_with_epochs().values():
            return int(owner.epoch)
        return self._progress.epoch if self._progress is not None else 0

    def _identity(self) -> dict[str, Any]:
        """What a state must have been saved with to resume here."""
        batch_size = self.batch_size
        if batch_size is None:
            batch_size = getattr(self.batch_sampler, "batch_size", None)
        return {
            "dataset_length": len(self.dataset),  # type: ignore[arg-type]
            "batch_size": batch_size,
            "batches_per_epoch": len(self),
            "seed": self.seed,
            "sampler": type(self.sampler).__name__,
            "world_size": getattr(self.sampler, "num_replicas", 1),
            "rank": getattr(self.sampler, "rank", 0),
        }

    def state_dict(self, *, batches: int | None = None) -> dict[str, Any]:
        """Where the loader is: the epoch, the batches of it handed out, and the states of
        the generators its order was drawn from; plain data for ``torch.save``.

        Args:
            batches: The batches of the epoch under way that the training loop has had
                since this ``iter()``, when a wrapper holds some in flight (DataPrefetcher
                passes its count); by default, all the iterator handed out.

        Example:
            >>> from torch.utils.data import TensorDataset
            >>> data = TensorDataset(torch.arange(10))
            >>> loader = FastLoader(data, batch_size=2, shuffle=True, seed=7)
            >>> batches = iter(loader)
            >>> seen = [next(batches)[0].tolist() for _ in range(2)]
            >>> state = loader.state_dict()
            >>> rest = [b[0].tolist() for b in batches]
            >>> resumed = FastLoader(data, batch_size=2, shuffle=True, seed=7)
            >>> resumed.load_state_dict(state)
            >>> [b[0].tolist() for b in resumed] == rest
            True
        """
        if self._resumable is None:
            raise TypeError("an IterableDataset keeps its own position: FastLoader cannot save it")
        pending = self._resume is not None
        progress = self._resume if pending else self._progress
        next_epoch = self._epochs_started
        if progress is not None:
            done = progress.skip
            if not pending:
                done += progress.yielded if batches is None else batches
            if done < len(self):
                return self._state(progress.epoch, done, progress.snapshot, between=False)
            next_epoch = progress.epoch + 1
        snapshot = RNGSnapshot.take(
            self._order_generators(), base_draw=self._next_iterator_is_fresh()
        )
        return self._state(next_epoch, 0, snapshot, between=True)

    def _state(self, epoch: int, done: int, snapshot: RNGSnapshot, *, between: bool) -> dict:
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": epoch,
            "batches": done,
            "between_epochs": between,
            "generators": dict(snapshot.states),
            "base_draw": snapshot.base_draw,
            "sampler_epochs": {
                name: int(owner.epoch) for name, owner in self._samplers_with_epochs().items()
            },
            **self._identity(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``'s state: the next ``iter()`` continues its epoch
        after the batches already handed out (or starts the next epoch, if that one was
        done). ``num_workers`` may differ; the data set, batch size, seed, sampler and
        world size may not.

        Raises:
            ValueError: Not a FastLoader state, or one saved by a loader that differs
                (the message says what differs).
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("not a FastLoader state: give what FastLoader.state_dict() returned")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"FastLoader state version {state.get('version')!r}; this fastload reads "
                f"{STATE_VERSION}"
            )
        if self._resumable is None:
            raise TypeError("an IterableDataset keeps its own position: nothing to resume")
        differences = [
            f"{key} {state.get(key)!r} in the state, {value!r} here"
            for key, value in self._identity().items()
            if state.get(key) != value
        ]
        if differences:
            raise ValueError(
                "cannot resume: the state was saved by a different loader: "
                + "; ".join(differences)
            )
        snapshot = RNGSnapshot(_checked_generators(state, self._order_generators()),
                               bool(state["base_draw"]))  # fmt: skip
        epoch, done = _count(state, "epoch"), _count(state, "batches")
        self._resume = EpochProgress(epoch, snapshot, skip=done, replay=True)
        self._epochs_started = epoch
        samplers = self._samplers_with_epochs()
        for name, value in dict(state.get("sampler_epochs") or {}).items():
            if name in samplers:
                samplers[name].set_epoch(int(value))
        if self._auto_epoch:
            # The next iter() advances the sampler's epoch only when the saved one was done.
            self._epoch = int(self.sampler.epoch) if state["between_epochs"] else None  # type: ignore[attr-defined]

    def keep_batch_seeds(self) -> None:
        """Queue each batch's per-sample seeds (with ``seed``) for :meth:`pop_batch_seeds`;
        DataPrefetcher calls it so that its GPU transform draws per sample."""
        if self._resumable is not None and self.seed is not None:
            self._resumable.track = True

    def pop_batch_seeds(self) -> Any:
        """The per-sample seeds (int64 NumPy array) of the oldest batch not yet asked for,
        in the order batches are handed out; None without ``seed``."""
        if self._resumable is None or not self._resumable.track or self.seed is None:
            return None
        epoch, indices = self._resumable.dispatched.popleft()
        return keyed_seeds(self.seed, epoch, indices)

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


class _Counting(_BaseDataLoaderIter):
    def __next__(self) -> Any:
        data = super().__next__()
        progress = self._index_sampler.progress  # the ResumableBatches' epoch under way
        progress.yielded = self._num_yielded
        return data


class _CountingSingleProcessIter(_Counting, _SingleProcessDataLoaderIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        fetcher = self._dataset_fetcher
        self._dataset_fetcher = NamingFetcher(
            fetcher.dataset, fetcher.auto_collation, fetcher.collate_fn, fetcher.drop_last
        )


class _CountingMultiProcessingIter(_Counting, _MultiProcessingDataLoaderIter):
    pass


STATE_FORMAT, STATE_VERSION = "fastload-loader", 1


def _count(state: dict[str, Any], key: str) -> int:
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"FastLoader state: {key} {value!r} is not a count")
    return value


def _checked_generators(
    state: dict[str, Any], generators: dict[str, torch.Generator]
) -> dict[str, bytes]:
    saved = state.get("generators")
    if not isinstance(saved, dict) or not isinstance(saved.get("torch"), bytes):
        raise ValueError("FastLoader state: no generator states")
    sizes = {"torch": torch.get_rng_state().numel()}
    sizes |= {name: g.get_state().numel() for name, g in generators.items()}
    for name, data in saved.items():
        if name not in sizes or not isinstance(data, bytes) or len(data) != sizes[name]:
            raise ValueError(
                f"FastLoader state: generator {name!r} does not match this loader's "
                f"({sorted(sizes)})"
            )
    return dict(saved)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()
