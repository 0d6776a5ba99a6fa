"""One batch prepared for the training thread: planned on the host, then copied, decoded,
transformed and finished on a side CUDA stream, and handed out behind an event.

:class:`BatchPreparer` is DataPrefetcher's per-batch work, apart from its passes and
epochs: :meth:`BatchPreparer.plan` (the batch's keyed seeds, where its image is, the
decoder's host part) runs where batches are taken from the loader, :meth:`BatchPreparer.run`
(everything on the device) on the stream made once for the prefetcher's life, and
:meth:`BatchPreparer.hand_out` on the training thread. Without CUDA the same code runs on
the CPU.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from fastload.batches import Path, has_targets, image_leaf_path, map_tensors, with_item
from fastload.buffers import BufferPool
from fastload.collate import EncodedBatch
from fastload.decode.contracts import PlansDecode
from fastload.finishing import DecoderDtype, ImageFinisher, settle_finish
from fastload.loader.contracts import KeyedSeedSource
from fastload.loader.superbatch import RunPart
from fastload.producer import Produced
from fastload.seeds import sample_seeds, seed_draws
from fastload.system import one_thread
from fastload.typed_torch import new_event, new_stream

__all__ = ["BatchPreparer", "Planned"]


@dataclasses.dataclass
class Planned:
    """A batch taken from the loader and planned: its number in the pass, its keyed seed
    draws, where its image is, the decoder's plan, and the super-batch it was cut from."""

    batch: Any
    number: int
    draws: Any = None
    image_path: Path | None = None
    decode: Any = None
    run: RunPart | None = None


class BatchPreparer:
    """Prepares DataPrefetcher's batches (its arguments, as DataPrefetcher documents
    them); ``background``: :meth:`plan` and :meth:`run` run on producer threads."""

    def __init__(
        self,
        loader: Any,
        device: torch.device,
        *,
        mean: Sequence[float] | None,
        std: Sequence[float] | None,
        statistics_scale: float,
        dtype: torch.dtype | DecoderDtype | None,
        channels_last: bool,
        transform: nn.Module | Callable[[torch.Tensor], torch.Tensor] | None,
        depth: int,
        image: int | str | None,
        decoder: Callable[[list[torch.Tensor]], torch.Tensor] | None,
        background: bool,
    ) -> None:
        # A decoder that finishes the batch itself (GPUDecoder(..., dtype=...)) owns the
        # finish: its output is not converted or normalised a second time.
        self.dtype, self.channels_last, self._decoded_finished = settle_finish(
            decoder, dtype, channels_last
        )
        if self._decoded_finished and mean is not None:
            raise ValueError(
                "the decoder already finishes the batch (its dtype, mean and std): give "
                "DataPrefetcher no mean/std of its own"
            )
        # CPU buffers: the ones in flight, and yours
        self._finisher = ImageFinisher(
            self.dtype, mean=mean, std=std, channels_last=self.channels_last,
            buffers=BufferPool(size=depth + 2), statistics_scale=statistics_scale,
        )  # fmt: skip
        self.loader, self.device, self.background = loader, device, background
        self.transform, self.image, self.decoder = transform, image, decoder
        # One stream for the prefetcher's lifetime: a stream per epoch grew reserved
        # memory without bound in timm (issue 2781). High priority: its copies, decodes
        # and kernels go ahead of the step's queued work.
        self.stream = new_stream(device, priority=-1) if device.type == "cuda" else None
        self._events: collections.deque[torch.cuda.Event] = collections.deque()
        self._runs = RunCopy()
        # The keyed-seed hand-off (fastload.loader.contracts): over FastLoader(seed=...),
        # the transform draws each sample's parameters from that sample's seed.
        self._seeds: KeyedSeedSource | None = None
        if (
            transform is not None
            and isinstance(loader, KeyedSeedSource)
            and loader.seed is not None
        ):
            self._seeds = loader
            loader.keep_batch_seeds()

    def _finish_image(self, image: torch.Tensor, *, transform: bool = True) -> torch.Tensor:
        if transform and self.transform is not None:
            image = self.transform(image)
        return image if self._decoded_finished else self._finisher(image)

    def _image_path(self, batch: Any) -> Path | None:
        if self.image is None:
            path = image_leaf_path(batch)
            # Encoded images come as an EncodedBatch (or a list) of bytes: the image is that.
            return path[:-1] if self.decoder is not None and path else path
        try:
            leaf = batch[self.image]
        except (KeyError, IndexError, TypeError):
            leaf = None
        wanted = (EncodedBatch, list, tuple) if self.decoder is not None else torch.Tensor
        if not isinstance(leaf, wanted):
            what = "batch of encoded images" if self.decoder is not None else "tensor"
            raise KeyError(
                f"image={self.image!r} names no {what} in a batch of type {type(batch).__name__}"
            )
        return (self.image,)

    def _prepare(self, planned: Planned) -> Any:
        batch = planned.batch
        image_path = planned.image_path
        if self.decoder is not None:
            assert image_path is not None
            images = (
                self.decoder.run(planned.decode)  # type: ignore[attr-defined]
                if planned.decode is not None
                else self.decoder(batch[image_path[0]])
            )
            batch = with_item(batch, image_path[0], images)

        # With masks, boxes or keypoints in the batch, the transform gets the whole batch
        # (fastload.gpu modules find the image and move the targets with it), and the
        # image is finished (dtype, normalisation) after it.
        whole = self.transform is not None and has_targets(batch)
        if planned.run is None:
            moved = self._move(batch, image_path, finish=not whole)
        else:
            # The run copied once; with nothing done per batch, finished once too. Else
            # each batch is transformed and finished as if it had come alone.
            once = self.transform is None
            moved = self._runs.part(
                planned.run, lambda run: self._move(run, image_path, finish=once)
            )
            if once:
                return moved
            if not whole:
                return self._finish_at(moved, image_path, transform=True)
        if not whole:
            return moved
        return self._finish_at(self.transform(moved), image_path, transform=False)  # type: ignore[misc]

    def _move(self, batch: Any, image_path: Path | None, *, finish: bool) -> Any:
        """Every tensor of ``batch`` on the device; with ``finish``, the image finished."""

        def move(path: Path, tensor: torch.Tensor) -> torch.Tensor:
            tensor = tensor.to(self.device, non_blocking=True)
            return self._finish_image(tensor) if finish and path == image_path else tensor

        return map_tensors(batch, move)

    def _finish_at(self, batch: Any, image_path: Path | None, *, transform: bool) -> Any:
        def finish(path: Path, tensor: torch.Tensor) -> torch.Tensor:
            return self._finish_image(tensor, transform=transform) if path == image_path else tensor

        return map_tensors(batch, finish)

    def plan(self, batch: Any, number: int, run: RunPart | None = None) -> Planned:
        """The host's part of preparing ``batch``, number ``number`` of the pass, in the
        order batches are taken: its seeds, where its image is, and the decoder's plan
        (headers, boxes) where it plans; the device work waits for :meth:`run`. ``run``:
        the super-batch the loader cut ``batch`` from, copied once for all its batches."""
        seeds = self._seeds.pop_batch_seeds() if self._seeds is not None else None
        draws = None if seeds is None else seed_draws(seeds)
        planned = Planned(batch, number, draws, run=run if self.decoder is None else None)
        try:
            planned.image_path = self._image_path(batch)
            if self.decoder is None:
                return planned
            if planned.image_path is None or len(planned.image_path) != 1:
                raise ValueError("decoder needs the encoded images at the top level of the batch")
            if isinstance(self.decoder, PlansDecode):
                with self._keyed_draws(draws):  # the decoder's boxes come first, as in run
                    planned.decode = self.decoder.plan(batch[planned.image_path[0]])
        except Exception as error:
            self._note(error, number)
            raise
        return planned

    def run(self, planned: Planned) -> tuple[Any, torch.cuda.Event | None]:
        """The device's part: ``planned`` prepared on the side stream, and its event."""
        try:
            with self._on_side_stream(), self._keyed_draws(planned.draws):
                return self._prepare(planned), self._record()
        except Exception as error:
            self._note(error, planned.number)
            raise

    @staticmethod
    def _note(error: Exception, number: int) -> None:
        error.add_note(f"fastload: raised by DataPrefetcher preparing batch {number} of the pass")

    @staticmethod
    def _keyed_draws(draws: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if draws is None else sample_seeds(draws)

    def _on_side_stream(self) -> contextlib.AbstractContextManager[None]:
        if self.stream is None:
            # On the CPU, worker processes have the cores: intra-op threads would spin
            # waiting for them (the prefetching guide gives the cost measured).
            # (Not from a producer thread: the setting is the process's, the training
            # thread's too.)
            workers = getattr(self.loader, "num_workers", 0)
            return (
                one_thread()
                if isinstance(workers, int) and workers > 0 and not self.background
                else contextlib.nullcontext()
            )
        if not self.background:
            # Wait for the work queued so far on the training stream before writing anew.
            # (A producer thread runs ahead of the training stream and must not wait for
            # its later steps: memory handed out is kept by record_stream instead.)
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self.stream)

    def _record(self) -> torch.cuda.Event | None:
        if self.stream is None:
            return None
        event = self._events.popleft() if self._events else new_event()
        event.record(self.stream)
        return event

    def hand_out(self, slot: Produced) -> Any:
        """``slot``'s batch for the training thread: its stream waits on the batch's event
        (no host wait), and the batch's memory is kept for that stream."""
        if slot.event is None:
            return slot.value
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(slot.event)
        self._events.append(slot.event)  # free to record again: the wait is enqueued

        def keep_alive(_path: Path, tensor: torch.Tensor) -> torch.Tensor:
            # Memory allocated on the side stream is used on the consumer's: tell the
            # caching allocator so it is not reused before the consumer is done with it.
            # record_stream returns None; the tensor itself is what we hand out.
            if tensor.device.type == "cuda":
                tensor.record_stream(consumer)
            return tensor

        return map_tensors(slot.value, keep_alive)


class RunCopy:
    """The super-batches the batches in preparation were cut from (``RunPart``), each
    copied to the device once (one copy per field of the run, from the one pinned buffer
    the loader pinned), and cut there as the loader cut it: a run of eight batches of 8
    crosses as one batch of 64 would. A round of workers' runs is handed out interleaved
    (a batch of each in turn), so a run is held until its last batch is taken, and at
    most the runs of one round are held (an older one, left part-taken by an epoch that
    stopped early, is let go: its copy would be made again if ever needed)."""

    def __init__(self) -> None:
        self._held: collections.OrderedDict[int, tuple[Any, list[Any]]] = collections.OrderedDict()

    def part(self, part: RunPart, copy: Callable[[Any], Any]) -> Any:
        """Batch ``part.index`` of ``copy(part.run.whole)``, made at the run's first batch
        taken."""
        key = id(part.run)
        held = self._held.get(key)
        if held is None or held[0] is not part.run:
            held = (part.run, part.run.cut(copy(part.run.whole)))
            self._held[key] = held
            while len(self._held) > max(part.run.of, 1):
                self._held.popitem(last=False)
        batch = held[1][part.index]
        if part.last:
            del self._held[key]
        return batch
