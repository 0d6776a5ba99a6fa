"""FastLoader: a :class:`torch.utils.data.DataLoader` with defaults that keep a GPU fed,
exact mid-epoch resume (``state_dict``/``load_state_dict``) and randomness keyed by
sample (``seed=``). What it fills in is decided in :mod:`fastload.loader.defaults`.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, IterableDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

from fastload.loader.accelerate_state import PreparedByItself
from fastload.loader.contracts import BatchConsumer, FetchesAhead, PublishesOrder
from fastload.loader.defaults import (
    AUTO,
    TUNE,
    Defaults,
    Machine,
    check_num_workers,
    choose_defaults,
    describe_choices,
)
from fastload.loader.exit import end_workers_at_exit, shut_down
from fastload.loader.fetch import DatasetView, IndexBatches
from fastload.loader.iterators import CountingMultiProcessIter, CountingSingleProcessIter
from fastload.loader.resume import (
    EpochProgress,
    ResumableBatches,
    begin_epoch,
    order_generators,
    restore_sampler_epochs,
)
from fastload.loader.seeding import order_generator, seeded_order
from fastload.loader.state import current_state, loader_identity, resume_point
from fastload.loader.superbatch import Grouping, group_mode, plan_super_batches
from fastload.loader.tuning import tune_loader
from fastload.loader.views import as_given, collate_set, data_view, fetches_rows
from fastload.loader.workers import (
    SendableBatch,
    WorkerInit,
    dataset_fingerprint,
    workers_refusal,
)
from fastload.seeds import keyed_seeds

__all__ = ["FastLoader"]


T_co = TypeVar("T_co", covariant=True)


logger = logging.getLogger(__name__)


class FastLoader(PreparedByItself, DataLoader[T_co]):
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
            (seconds to minutes at construction; fewer workers can win
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
        super_batches: Each worker loads the small batches DataLoader would send it
            several at a time, one message for them all (the same batches, the same
            worker, in order); None: where it helps (docs/guides/loader.md, "Small
            batches"). True, False or None.
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
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int | str = AUTO,
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
        super_batches: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_num_workers(num_workers)
        generator = order_generator(seed, generator, kwargs)
        dataset, collate_fn, worker_init_fn = as_given(dataset, collate_fn, worker_init_fn)
        iterable = isinstance(dataset, IterableDataset)
        view, collate_fn, in_memory, keyed = data_view(
            dataset, collate_fn, iterable=iterable, seed=seed,
            collates=batch_size is not None or batch_sampler is not None,
        )  # fmt: skip
        tuned = None
        if num_workers == TUNE and not in_memory:
            tuned = tune_loader(
                view, batch_size, collate_fn, drop_last, pin_memory, worker_init_fn, prefetch_factor
            )
        defaults = choose_defaults(
            num_workers=num_workers,
            machine=Machine.here(),
            in_memory=in_memory,
            iterable=iterable,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
            has_sampler=sampler is not None or batch_sampler is not None,
            tuned=tuned,
        )
        self.choices = defaults.choices
        if defaults.warning is not None:
            warnings.warn(defaults.warning, stacklevel=2)
        # Workers FastLoader chose are dropped if a batch could not travel from them.
        chosen = isinstance(num_workers, str)
        self._check_sendable = chosen and defaults.num_workers > 0 and not iterable
        sampler, shuffle = self._choose_sampler(
            view, sampler, shuffle, defaults, seed=seed, drop_last=drop_last,
            ordered=not iterable and sampler is batch_sampler is None,
        )  # fmt: skip
        super().__init__(
            view,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=defaults.num_workers,
            collate_fn=collate_fn,
            pin_memory=defaults.pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=WorkerInit(worker_init_fn),
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=defaults.prefetch_factor,
            persistent_workers=defaults.persistent_workers,
            **kwargs,
        )
        self.seed = seed
        # Persistent workers FastLoader chose (DataLoader's default is none) keep
        # DataLoader's promises across epochs: see __iter__.
        self._chosen_persistence = persistent_workers is None and bool(self.persistent_workers)
        self._workers_given: tuple[Any, ...] | None = None
        self._start_batches(dataset, in_memory=in_memory, keyed=keyed, iterable=iterable)
        self._grouping, why = plan_super_batches(super_batches, self, in_memory=in_memory)
        self._super_batches_given = super_batches
        self.super_batches, self.choices = self._grouping is not None, self.choices | why
        if self.choices:
            logger.info("%s chose %s", type(self).__name__, describe_choices(self))
        self._constructed = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "collate_fn" and self.__dict__.get("_constructed"):
            collate_set(self.dataset, value, self.choices)
        if name == "worker_init_fn" and not isinstance(value, WorkerInit):
            value = WorkerInit(value)  # the workers' start-up (their fetch of a group) first
        super().__setattr__(name, value)

    def _current_grouping(self) -> Grouping | None:
        """The grouping the next iterator deals its batches by: to the workers there are
        now, collated by the collate_fn there is now."""
        if self._grouping is None or (self.num_workers == 0 and self._super_batches_given is None):
            return None  # (workers dropped since): DataLoader loads no batch ahead without
        mode = group_mode(self, in_memory=fetches_rows(self.dataset))
        return dataclasses.replace(self._grouping, mode=mode, workers=max(1, self.num_workers))

    def _choose_sampler(
        self, view: Dataset[Any], sampler: Any, shuffle: bool | None, defaults: Defaults, *,
        seed: int | None, drop_last: bool, ordered: bool,
    ) -> tuple[Any, bool | None]:  # fmt: skip
        """The sampler and ``shuffle`` DataLoader gets: a DistributedSampler where the loader
        chose one (its epoch then advanced by the loader), a keyed order for ``shuffle``
        with ``seed``, else the user's."""
        self._auto_epoch = False
        self._epoch: int | None = None
        # the sampler's epoch less the loader's, where the loader drives it (for the state)
        self._sampler_offset: int | None = None
        if defaults.distributed_sampler:
            sampler = DistributedSampler(
                view, shuffle=bool(shuffle), drop_last=drop_last, seed=seed or 0
            )
            self._auto_epoch = True
            self.choices["sampler"] = f"rank {sampler.rank} of {sampler.num_replicas}"
            return sampler, None
        if shuffle and seed is not None and ordered:
            return seeded_order(view, seed), None  # type: ignore[arg-type]
        return sampler, shuffle

    def _start_batches(
        self, dataset: Dataset[Any], *, in_memory: bool, keyed: bool, iterable: bool
    ) -> None:
        """Where the iterators take their batches of indices from: the resumable batches
        (the epoch's progress, and the dataset's download-ahead of the order its sampler
        publishes), over the in-memory fast path's own where it applies."""
        # Private hook of DataLoader (stable since torch 1.2): it reads batches of
        # indices from `_index_sampler`. Without the hook, the batches are still right.
        self._index_batches = (
            IndexBatches(self.batch_sampler)
            if in_memory and type(self.batch_sampler) is BatchSampler
            else None
        )
        self._epochs_started = 0
        self._progress: EpochProgress | None = None  # the epoch under way, or the last
        self._resume: EpochProgress | None = None  # load_state_dict's, for the next epoch
        batches = self._index_batches or DataLoader._index_sampler.fget(self)  # type: ignore[attr-defined]
        # torch's BatchSampler and FastLoader's own make a new batch each time
        fresh = self._index_batches is not None or type(self.batch_sampler) is BatchSampler
        self._resumable = (
            None
            if iterable
            else ResumableBatches(
                batches,
                keyed=keyed,
                ahead=self._download_ahead(dataset),
                fresh=fresh,
                batched=self._auto_collation,
            )
        )

    def _download_ahead(self, dataset: Dataset[Any]) -> tuple[PublishesOrder, FetchesAhead] | None:
        """The sampler whose order ``dataset`` fetches ahead of the workers, where the
        batches are cut from that order as it comes."""
        sampler = self.sampler
        cut_as_it_comes = self.batch_sampler is None or (
            type(self.batch_sampler) is BatchSampler and self.batch_sampler.sampler is sampler
        )
        if (
            cut_as_it_comes
            and isinstance(sampler, PublishesOrder)
            and isinstance(dataset, FetchesAhead)
        ):
            return sampler, dataset
        return None

    def _get_iterator(self) -> Any:
        if self._check_sendable:
            self._check_sendable = False
            refusal = workers_refusal(self)
            if refusal is not None:
                self.choices["num_workers"], reason = refusal
                warnings.warn(f"FastLoader uses no workers: {reason}", stacklevel=3)
                self.num_workers = 0
        # The workers get a collate that checks each batch can be sent; the attribute
        # users and frameworks read stays what they gave (or DataLoader's default).
        grouping = self._current_grouping()
        if self._chosen_persistence:
            self._workers_given = dataset_fingerprint(self.dataset)
        if self.num_workers == 0:
            return self._new_iterator(grouping)
        collate_fn = self.collate_fn
        object.__setattr__(self, "collate_fn", SendableBatch(collate_fn))
        try:
            return self._new_iterator(grouping)
        finally:
            object.__setattr__(self, "collate_fn", collate_fn)

    def _new_iterator(self, grouping: Grouping | None) -> _BaseDataLoaderIter:
        """DataLoader's iterator, one that also counts for ``state_dict`` the batches it
        hands out (it holds no reference to the loader, as DataLoader's does not)."""
        if self._resumable is None:
            return end_workers_at_exit(super()._get_iterator())
        if self.num_workers == 0:
            return CountingSingleProcessIter(self, grouping)
        self.check_worker_number_rationality()
        return end_workers_at_exit(CountingMultiProcessIter(self, grouping))

    @property
    def _index_sampler(self) -> Any:
        resumable = self.__dict__.get("_resumable")
        if resumable is not None:
            return resumable
        if self.__dict__.get("_index_batches") is not None:
            return self._index_batches
        return super()._index_sampler

    def __iter__(self) -> _BaseDataLoaderIter:
        self._release_consumer(replay=True)
        if shut_down(self._iterator):  # its workers are gone: a pass needs new ones
            self._iterator = None
        reused = not self._next_iterator_is_fresh()
        if reused and self._chosen_persistence:
            reused = self._keep_workers()
        if self._auto_epoch:
            self._advance_epoch()
        if self._resumable is not None:
            self._start_epoch()
        if reused and self._chosen_persistence:
            # the draw of the workers' base seed a new iterator makes, as DataLoader
            # without persistent workers makes it at every epoch: the same orders follow
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        return super().__iter__()

    def _keep_workers(self) -> bool:
        """Whether the persistent workers FastLoader chose still hold the dataset as it is
        (:func:`dataset_fingerprint`); if not, they end, and the next pass starts new ones
        that see the data as DataLoader's new workers would."""
        if dataset_fingerprint(self.dataset) == self._workers_given:
            return True
        self._iterator._shutdown_workers()  # type: ignore[union-attr]
        self._iterator = None
        return False

    # --- checkpoints -----------------------------------------------------------------------------

    def _next_iterator_is_fresh(self) -> bool:
        """Whether the next ``iter()`` makes a new DataLoader iterator (which draws the
        workers' base seed) rather than resetting the persistent one (which, where
        FastLoader chose persistence, makes the same draw: see ``__iter__``)."""
        return self._iterator is None or not (self.persistent_workers and self.num_workers > 0)

    def _draws_base_seed(self) -> bool:
        """Whether the next ``iter()`` draws the workers' base seed before the order."""
        return self._chosen_persistence or self._next_iterator_is_fresh()

    def _start_epoch(self) -> None:
        if self._progress is not None:
            self._progress.close()  # an epoch left part-way: Accelerate no longer sees it
        fresh = self._draws_base_seed()
        self._progress = begin_epoch(
            self, self._resume, epoch=self._epochs_started, fresh_iterator=fresh
        )
        self._resume = None
        self._epochs_started = self._progress.epoch + 1
        self._sampler_offset = (
            int(self.sampler.epoch) - self._progress.epoch if self._auto_epoch else None  # type: ignore[attr-defined]
        )
        self._resumable.progress = self._progress  # type: ignore[union-attr]

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: the epoch, the batches of it trained on, and the states of
        the generators its order was drawn from; plain data for ``torch.save``.

        The batches trained on are the ones the iterator handed out, or, when a
        DataPrefetcher drives the epoch, the ones it handed to the training loop (not
        those it holds in flight): the loader's state and the prefetcher's are the same.

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
        return current_state(
            self,
            self._progress,
            self._resume,
            epochs_started=self._epochs_started,
            sampler_offset=self._sampler_offset if self._auto_epoch else None,
            fresh_iterator=self._draws_base_seed(),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``'s state: the next ``iter()`` continues its epoch
        after the batches already handed out (or starts the next epoch, if that one was
        done). ``num_workers`` may differ; the data set, batch size, seed, sampler and
        world size may not.

        Raises:
            ValueError: Not a FastLoader state, or one saved by a loader that differs
                (the message says what differs).
            TypeError: The dataset is an IterableDataset, which keeps its own position.
        """
        if self._resumable is None:
            raise TypeError("an IterableDataset keeps its own position: nothing to resume")
        self._release_consumer(replay=False)
        self._resume = resume_point(state, loader_identity(self), order_generators(self))
        self._epochs_started = self._resume.epoch
        restore_sampler_epochs(self, state["sampler_epochs"])
        self._sampler_offset = state.get("sampler_offset")
        if self._auto_epoch:
            # The next iter() advances the sampler's epoch only when the saved one was done.
            self._epoch = int(self.sampler.epoch) if state["between_epochs"] else None  # type: ignore[attr-defined]

    def count_batches_by(self, consumer: BatchConsumer) -> None:
        """The epoch the last ``iter()`` began counts, in :meth:`state_dict`, the batches
        ``consumer`` handed to the training loop (DataPrefetcher calls it)."""
        if self._progress is not None:
            self._progress.consumer = weakref.ref(consumer)
            self._progress.close()  # the consumer tells Accelerate where the epoch ends

    def _release_consumer(self, *, replay: bool) -> None:
        """Tell the consumer of the epoch under way that the loader starts over: it drops
        the next epoch's iterator if it began one ahead (see DataPrefetcher). With
        ``replay``, that epoch, none of it trained on, is begun again by the next
        ``iter()``, in the same order: no epoch is skipped."""
        reference = None if self._progress is None else self._progress.consumer
        consumer = None if reference is None else reference()
        if consumer is None:
            return
        state = self.state_dict() if replay else None  # the begun epoch, at its start
        if consumer.release() and state is not None:
            self.load_state_dict(state)

    def keep_batch_seeds(self) -> None:
        """Queue each batch's per-sample seeds (with ``seed``) for :meth:`pop_batch_seeds`;
        DataPrefetcher calls it so that its GPU transform draws per sample."""
        if self._resumable is not None and self.seed is not None:
            self._resumable.track = True

    def pop_batch_seeds(self) -> np.ndarray | None:
        """The per-sample seeds (int64 NumPy array) of the oldest batch not yet asked for,
        in the order batches are handed out; None without ``seed``."""
        if self._resumable is None or not self._resumable.track or self.seed is None:
            return None
        epoch, indices = self._resumable.dispatched.popleft()
        return keyed_seeds(self.seed, epoch, indices)

    def _advance_epoch(self) -> None:
        # A user who calls set_epoch() themselves keeps control: the epoch only moves on
        # while the sampler still holds the value it had at the previous iteration.
        sampler: DistributedSampler[Any] = self.sampler  # type: ignore[assignment]
        if self._epoch is None:
            self._epoch = sampler.epoch
        elif sampler.epoch != self._epoch:
            self._auto_epoch = False
        else:
            self._epoch += 1
            sampler.set_epoch(self._epoch)

    def __repr__(self) -> str:
        """Its settings, its sampler (one that says what it does, as ``ShardShuffle``'s
        ``drop_last``, by its own ``repr``), and what it chose and why."""
        view = self.dataset if isinstance(self.dataset, DatasetView) else None
        sampler = self.sampler
        fields = {
            "dataset": type(self.dataset if view is None else view.dataset).__name__,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "prefetch_factor": self.prefetch_factor,
            "sampler": (
                repr(sampler) if type(sampler).__repr__ is not object.__repr__
                else type(sampler).__name__
            ),
            "drop_last": self.drop_last,
            "batched_fetch": fetches_rows(self.dataset),
            "super_batches": self.super_batches,
        }  # fmt: skip
        body = ", ".join(f"{key}={value}" for key, value in fields.items())
        why = f"\n  chosen: {describe_choices(self)}" if self.choices else ""
        return f"{type(self).__name__}({body}){why}"
