"""DataPrefetcher: copy the next batches to the GPU on a side stream and finish them there.

The step on batch k overlaps the copy (and the conversion, augmentation, normalisation)
of batch k+1 ... k+depth. Pixels cross PCIe as uint8, four times fewer bytes than float32.
Without CUDA the same code runs synchronously on the CPU, with identical results.

This module holds the passes and epochs (iteration, the producer threads, the epoch begun
ahead, the loader's state); what is done to each batch is :mod:`fastload.preparing`'s.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn

import torch
from torch import nn

from fastload._checks import check_int
from fastload.finishing import DecoderDtype
from fastload.loader.accelerate_state import EpochEnd, epoch_end
from fastload.loader.contracts import HandsOutRuns, ResumableLoader
from fastload.loader.proxy import LoaderProxy
from fastload.loader.resume import samplers_with_epochs
from fastload.loader.superbatch import RunPart
from fastload.loader.workers import dataset_fingerprint
from fastload.preparing import BatchPreparer, Planned
from fastload.producer import Produced, Producer, produce_one, weak_method
from fastload.system import default_device
from fastload.typed_torch import length

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "DataPrefetcher"]

#: The usual normalisation statistics, on the 0..1 scale.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DataPrefetcher(LoaderProxy):
    """Iterate over ``loader`` with every batch already on ``device`` and finished there.

    For each batch, on a side CUDA stream: copy every tensor with ``non_blocking=True``
    (from pinned memory if the loader pins), then on the image only: ``transform``,
    conversion to ``dtype`` (integers are scaled to 0..1 as torchvision's ``to_dtype``
    scales them: uint8 by 255, uint16 by 65535), normalisation with ``mean`` and
    ``std``, and ``channels_last``. Labels and other tensors are moved, not converted;
    other leaves pass through. Up to ``depth`` batches are in flight while you train.

    Args:
        loader: Any iterable of batches: a FastLoader, a DataLoader, a list.
        device: Where batches go; the current CUDA device if available, else the CPU.
        mean: Per-channel mean on the 0..1 scale, as in torchvision.
        std: Per-channel standard deviation, on the same scale as ``mean``.
        statistics_scale: 255 for ``mean`` and ``std`` on the 0..255 scale, as in
            apex's recipe; a mean above 1 without it is refused.
        dtype: Floating dtype of the image (float32, float16, bfloat16), or None to
            leave the image's dtype alone. Default: float32; with a ``decoder`` that
            finishes the batch, the decoder's (a different one given here is refused).
        channels_last: Return 4-D images in ``torch.channels_last`` memory format (with
            a finishing ``decoder``: as the decoder lays them out).
        transform: An ``nn.Module`` (say an ``nn.Sequential`` of ``fastload.gpu``
            modules) applied to the image batch on the device, before ``dtype`` and
            normalisation. When the batch holds masks, boxes or keypoints
            (``tv_tensors``), it gets the whole batch, and moves them with the image.
        depth: Batches prepared ahead of the one you hold.
        image: Which leaf is the image: an index into a tuple/list batch or a key of a
            dict batch. Default: the key ``"image"`` (or ``"images"``) of a dict, else the
            first 4-D tensor, else the first tensor (with ``decoder``: the list holding it).
        decoder: Turns the image leaf, a list of encoded images, into an NCHW uint8 batch
            on the device, e.g. ``fastload.decode.GPUDecoder(224)``; runs on the side stream
            before ``transform``. One that finishes the batch itself
            (``GPUDecoder(224, mean=..., std=..., dtype=...)``) is not converted again.
        background: Prepare batches (take them from the loader, decode, transform,
            finish) on a thread of its own, so that the training thread only waits for
            an event; default: with a ``decoder``, whose host-side work (headers, boxes,
            launches) would otherwise stall the training loop between steps.

    Example:
        >>> white = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
        >>> batches = [(white, torch.tensor([0, 1]))]
        >>> prefetcher = DataPrefetcher(batches, device="cpu", mean=[0.5] * 3, std=[0.5] * 3)
        >>> images, labels = next(iter(prefetcher))
        >>> images.dtype, round(images.max().item(), 5), labels.tolist()
        (torch.float32, 1.0, [0, 1])
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: torch.device | str | int | None = None,
        *,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        statistics_scale: float = 1,
        dtype: torch.dtype | DecoderDtype | None = DecoderDtype.DEFAULT,
        channels_last: bool = False,
        transform: nn.Module | Callable[[torch.Tensor], torch.Tensor] | None = None,
        depth: int = 2,
        image: int | str | None = None,
        decoder: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
        background: bool | None = None,
    ) -> None:
        check_int(depth, "depth", low=1)
        self.loader = loader
        self.device = default_device() if device is None else torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.transform = transform
        self.depth = depth
        self.image = image
        self.decoder = decoder
        self.mean = None if mean is None else tuple(float(m) for m in mean)
        self.std = None if std is None else tuple(float(s) for s in std)
        self.background = decoder is not None if background is None else bool(background)
        self._preparer = BatchPreparer(
            loader, self.device, mean=mean, std=std, statistics_scale=statistics_scale,
            dtype=dtype, channels_last=channels_last, transform=transform, depth=depth,
            image=image, decoder=decoder, background=self.background,
        )  # fmt: skip
        # The finish as it comes out: a finishing decoder's, else the arguments'.
        self.dtype, self.channels_last = self._preparer.dtype, self._preparer.channels_last
        self._iterator: Iterator[Any] | None = None
        self._pending: collections.deque[Produced] = collections.deque()
        self._producer: Producer | None = None
        self._implicit_pass: Iterator[Any] | None = None  # the pass next() began, without iter()
        self._handed = 0  # batches of the loader's epoch given to the training loop (or failed)
        self._passes = 0  # iter() calls: an older pass's iterator is over
        self._starting = False  # a pass began whose loader starts at its first next()
        self._length: int | None = None  # the batches of the pass's epoch, where known
        self._ahead: _Ahead | None = None  # the next epoch, begun as this one ended
        self._beginning = False  # in iter() of the loader
        self._end: EpochEnd | None = None  # the pass's epoch, as Accelerate sees it

    # --- per batch ---------------------------------------------------------------------------

    def _preload(self) -> None:
        """Take the next batch from the loader and start preparing it; never raises."""
        if self._iterator is None:
            raise RuntimeError("DataPrefetcher: no epoch started")
        self._pending.append(produce_one(self._iterator, self._produce))

    def _produce(self, taken: _Taken) -> tuple[Any, torch.cuda.Event | None]:
        """A batch prepared on the side stream (both parts, on one thread), and its event."""
        return self._preparer.run(self._plan(taken))

    def _plan(self, taken: _Taken) -> Planned:
        return self._preparer.plan(taken.batch, taken.number, taken.run)

    def _run(self, planned: Planned) -> tuple[Any, torch.cuda.Event | None]:
        return self._preparer.run(planned)

    # --- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Begin a pass over the loader, ``depth`` batches in flight once it starts: at the
        pass's first ``next()`` (Lightning calls ``iter()`` to check a loader and drops
        the iterator; that must start no epoch). As with DataLoader's iterators,
        ``iter()`` of the pass is the pass: ``for b in it`` goes on from there. A pass
        left early ends here; the epoch a finished pass began ahead is kept for it."""
        if self._iterator is not None:
            self._close()
        self._passes += 1
        self._starting = True
        return _Pass(self, self._passes)

    def _start(self) -> None:
        """The pass's loader iterator, and its first batches under way: the epoch begun
        ahead, if it still holds, or a new one."""
        self._starting = False
        ahead = self._ahead
        if ahead is not None and ahead.holds(self.loader):
            self._ahead = None
            self._iterator, self._length, self._handed = ahead.batches, ahead.length, 0
            self._tell_accelerate()
            return
        # An epoch begun ahead that no longer holds goes with its thread; begun again
        # from where it began (none of it trained on): the same order, the data as it is.
        replay = None
        if ahead is not None and isinstance(self.loader, ResumableLoader):
            replay = self.loader.state_dict()
        self._close()
        if replay is not None:
            self._resumable_loader().load_state_dict(replay)
        try:
            self._iterator = self._begin_epoch()
            self._handed = 0
            self._length = self._epoch_length()
            if self.background:
                self._producer = Producer(
                    self._iterator, weak_method(self._run), depth=self.depth,
                    plan=weak_method(self._plan),
                )  # fmt: skip
            else:
                for _ in range(self.depth):
                    self._preload()
            self._tell_accelerate()
        except BaseException:  # KeyboardInterrupt: leave no half-started epoch behind
            self._close()
            raise

    def _tell_accelerate(self) -> None:
        """Accelerate's ``GradientState`` follows this pass, not the loader's iterator
        (ahead by ``depth`` batches, and into the next epoch as this one ends): the
        FastLoader handed its epoch to this prefetcher (``count_batches_by``)."""
        if self._length is not None:
            self._end = epoch_end(self.loader)  # type: ignore[arg-type]

    def _begin_epoch(self) -> Iterator[Any]:
        """A new epoch's iterator of the loader; the batches of it are counted from here
        (until then, the last epoch's stand) for the loader's state."""
        self._beginning = True  # the loader's release() below is this prefetcher's own doing
        try:
            batches = iter(self.loader)
        finally:
            self._beginning = False
        if isinstance(self.loader, ResumableLoader):
            self.loader.count_batches_by(self)
        return _WithRuns(batches)

    def _epoch_length(self) -> int | None:
        """The batches the epoch just begun hands out (fewer than ``len()`` when resumed),
        where the loader says: only then is the next epoch begun ahead."""
        if not isinstance(self.loader, ResumableLoader):
            return None
        try:
            return length(self.loader) - int(self.loader.state_dict()["batches"])
        except TypeError:  # an IterableDataset: no length, no state
            return None

    def _begin_ahead(self) -> None:
        """The last batch of the epoch handed out and the producer at the epoch's end:
        begin the next epoch now, on this thread (as the next pass would, one step
        earlier), so the producer prepares its first batches during the last steps."""
        assert self._producer is not None
        try:
            batches = self._begin_epoch()
        except Exception:  # the next pass's iter() meets it again and raises it there
            self._producer.follow_with(None)
            return
        self._ahead = _Ahead(
            batches, sampler_epochs(self.loader), length=None, data=_data_of(self.loader)
        )
        self._ahead.length = self._epoch_length()
        self._producer.follow_with(batches)

    def __next__(self) -> Any:
        if not self._starting and self._iterator is None:
            self._implicit_pass = iter(self)  # held: a pass dropped would stop its producer
        if self._starting:
            self._start()
        slot = self._producer.get() if self._producer is not None else self._pending.popleft()
        if slot.end:
            self._iterator = None
            self._end_epoch()
            if self._ahead is None:
                self._close()
            raise StopIteration
        try:
            batch = None if slot.error is not None else self._preparer.hand_out(slot)
            self._handed_one()
        except BaseException:  # KeyboardInterrupt included: leave no half-read epoch
            self._close()
            raise
        if slot.error is not None:  # as DataLoader, the pass goes on after a failed batch
            _raise_taken(slot)
        return batch

    def _handed_one(self) -> None:
        """A batch (or its error) went to the training loop: count it, and keep ``depth``
        in flight (at the epoch's last, begin the next one ahead)."""
        self._handed += 1
        if self._end is not None and self._handed == self._length:
            self._end.end_of_dataloader = True
        if self._producer is None:
            self._preload()
        elif self._handed == self._length and self._producer.ended_after(self._handed):
            self._begin_ahead()

    def state_dict(self) -> dict[str, Any]:
        """The loader's state as of the batches handed to the training loop, not the
        ones in flight: resuming from it yields the batch after the one you hold. The
        loader's own ``state_dict()`` says the same (the prefetcher tells it what it
        handed out), so a framework may save either. Needs a FastLoader."""
        return self._resumable_loader().state_dict()

    def trained_batches(self) -> int:
        """The batches of the loader's epoch under way handed to the training loop (none
        of an epoch begun ahead)."""
        return 0 if self._ahead is not None else self._handed

    def release(self) -> bool:
        """The loader begins an epoch for someone else, or loads a state: an epoch begun
        ahead is dropped (its thread would read the loader's reset iterator). Whether
        there was one."""
        if self._beginning or self._ahead is None:
            return False
        self._close()
        return True

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the loader from :meth:`state_dict`'s state (see FastLoader's)."""
        self._resumable_loader().load_state_dict(state)

    def _resumable_loader(self) -> ResumableLoader:
        if not isinstance(self.loader, ResumableLoader):
            raise TypeError(f"{type(self.loader).__name__} has no state_dict: use a FastLoader")
        return self.loader

    def next(self) -> Any:
        """apex's ``data_prefetcher.next()``: the next batch, or None once at the end of an
        epoch; the call after that starts the next epoch."""
        try:
            return next(self)
        except StopIteration:
            return None

    def _end_epoch(self) -> None:
        if self._end is not None:
            self._end.close()
            self._end = None

    def _close(self) -> None:
        self._starting = False
        self._end_epoch()
        self._ahead = None
        if self._producer is not None:
            self._producer.close()  # before the iterator goes: the thread reads from it
            self._producer = None
        self._pending.clear()
        self._iterator = None

    def __repr__(self) -> str:
        names = (
            "device", "dtype", "mean", "std", "channels_last", "depth", "transform", "decoder",
            "background",
        )  # fmt: skip
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in names)
        return f"{type(self).__name__}({fields})"


def _raise_taken(slot: Produced) -> NoReturn:
    """Raise the slot's error, letting go of it: its traceback holds the frames it passes,
    and a frame or slot holding the error would be a cycle that keeps the prefetcher (and
    its loader's workers) alive until the garbage collector runs."""
    error, slot.error = slot.error, None
    try:
        assert error is not None
        raise error
    finally:
        error = None


@dataclasses.dataclass
class _Ahead:
    """The next epoch, begun as the last one ended: its iterator (the producer reads it),
    the epochs of the loader's samplers then, its dataset as it was, and its length. It
    holds for the next pass while nobody has set a sampler's epoch since (a loop's
    ``set_epoch(epoch)`` makes the order another one) nor given the dataset new data
    (``subset.indices = ...``, :func:`~fastload.loader.workers.dataset_fingerprint`): the
    epoch is otherwise begun again, as the loop's ``iter()`` would have begun it."""

    batches: Iterator[Any]
    epochs: dict[str, int]
    length: int | None
    data: tuple[Any, ...] = ()

    def holds(self, loader: Any) -> bool:
        return sampler_epochs(loader) == self.epochs and _data_of(loader) == self.data


def _data_of(loader: Any) -> tuple[Any, ...]:
    return dataset_fingerprint(getattr(loader, "dataset", None))


def sampler_epochs(loader: Any) -> dict[str, int]:
    """The epoch of each of ``loader``'s samplers that has one (``set_epoch``)."""
    return {name: int(owner.epoch) for name, owner in samplers_with_epochs(loader).items()}


@dataclasses.dataclass(frozen=True)
class _Taken:
    """A batch as taken from the loader: its number in the epoch (its errors name it;
    failed batches count) and the super-batch it was cut from."""

    batch: Any
    number: int
    run: RunPart | None


class _WithRuns:
    """A loader's iterator giving each batch numbered, with the super-batch it was cut
    from where the loader says (:class:`HandsOutRuns`), read right after it was taken."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self.batches = batches
        self._runs = batches if isinstance(batches, HandsOutRuns) else None
        self._taken = 0

    def __iter__(self) -> _WithRuns:
        return self

    def __next__(self) -> _Taken:
        number = self._taken
        try:
            batch = next(self.batches)
        except StopIteration:
            raise
        except Exception:
            self._taken += 1  # a batch that failed: the next is the one after it
            raise
        self._taken += 1
        return _Taken(batch, number, None if self._runs is None else self._runs.handed_run)


class _Pass:
    """One pass over a DataPrefetcher, what ``iter()`` gives: over once it ended or a
    newer pass began."""

    def __init__(self, prefetcher: DataPrefetcher, number: int) -> None:
        self.prefetcher, self.number = prefetcher, number

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        if self.prefetcher._passes != self.number:
            raise RuntimeError("DataPrefetcher: iter() began a newer pass; this one is over")
        if self.prefetcher._iterator is None and not self.prefetcher._starting:  # it ended
            raise StopIteration
        return next(self.prefetcher)

    def __len__(self) -> int:
        return len(self.prefetcher)

    def __del__(self) -> None:
        # A pass left early (``break``) stops its producer thread: nothing else would.
        # (A pass that ended leaves it reading the epoch begun ahead.)
        prefetcher = self.prefetcher
        if prefetcher._passes == self.number and prefetcher._iterator is not None:
            prefetcher._close()
