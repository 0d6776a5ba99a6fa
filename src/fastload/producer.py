"""Batches prepared on a background thread, so the training thread only waits on an event.

A :class:`Producer` takes each batch from an iterator, runs ``prepare`` on it (decode,
augment, normalise: on the producer's own CUDA stream, made once by its owner), records
an event, and queues the result, at most ``depth`` ahead. The training thread takes
them in order; an exception is queued at its batch's turn, and the thread goes on with
the next batch (as DataLoader's iterator goes on after a batch that failed to load). At
the iterator's end the thread queues an ``end`` item and waits for the owner to hand it
the next epoch's iterator (:meth:`Producer.follow_with`): one thread for all the epochs,
which starts on the next one while the training thread finishes this one. The thread
ends when the owner says no epoch follows, or at :meth:`Producer.close`, which the
owner calls when a pass ends early (a ``break``, an exception, garbage collection,
interpreter exit).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Produced", "Producer", "produce_one", "weak_method"]

_POLL_S = 0.05  # how often a blocked producer looks at the stop flag


@dataclasses.dataclass
class Produced:
    """One queued batch: ``value`` ready once ``event`` fires (None on the CPU), or the
    ``error`` its preparation raised, or the ``end`` of the iterator."""

    value: Any = None
    event: Any = None
    error: BaseException | None = None
    end: bool = False


class Producer:
    """Runs ``prepare(batch)`` for every batch of ``batches`` on a thread of its own.

    ``prepare`` returns ``(value, event)``. Iterate over the producer to get the
    :class:`Produced` items in order (a failed batch's has ``error`` set), up to the one
    with ``end`` set.

    With ``plan``, the work is split between two threads: one takes each batch from the
    iterator and runs ``plan(batch)`` (the host's part: headers, boxes, seeds), the other
    runs ``prepare`` on what it planned (the device's: decode, kernels, the event). The
    first never waits on a decode: it plans batch k+1 while batch k decodes, up to
    ``depth`` planned batches ahead of the device thread.

    Example:
        >>> producer = Producer(iter([1, 2]), lambda x: (x * 10, None), depth=1)
        >>> [item.value for item in producer if not item.end]
        [10, 20]
    """

    def __init__(
        self,
        batches: Iterator[Any],
        prepare: Callable[[Any], tuple[Any, Any]],
        *,
        depth: int,
        plan: Callable[[Any], Any] | None = None,
        name: str = "fastload-producer",
    ) -> None:
        self._queue: queue.Queue[Produced] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._epochs = _Epochs(batches)
        queues, threads = [self._queue], []
        if plan is None:
            self._reader = self._thread = _thread(
                _read, name, self._epochs, prepare, self._queue, self._stop
            )
            threads = [self._thread]
        else:
            planned: queue.Queue[Produced] = queue.Queue(maxsize=depth)
            self._reader = _thread(_read, name, self._epochs, _unevented(plan), planned, self._stop)
            self._thread = _thread(_finish, f"{name}-device", planned, prepare, self._queue,
                                   self._stop)  # fmt: skip
            queues, threads = [planned, self._queue], [self._reader, self._thread]
        for thread in threads:
            thread.start()
        # A producer nobody closed (its owner collected, the interpreter exiting) still stops.
        self._finalizer = weakref.finalize(self, _stop, threads, queues, self._stop)

    def __iter__(self) -> Iterator[Produced]:
        while True:
            item = self.get()
            yield item
            if item.end:
                return

    def get(self) -> Produced:
        """The next item, waiting for it."""
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("fastload: the producer thread stopped") from None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def ended_after(self, batches: int) -> bool:
        """Whether the current epoch's iterator ended after exactly ``batches`` batches
        (failed ones included), waiting until the thread knows: it has ended or taken one
        batch more
        (which the queue always has room for once ``batches`` were taken from it)."""
        return self._epochs.ended_after(batches, self._reader)

    def follow_with(self, batches: Iterator[Any] | None) -> None:
        """The iterator of the epoch after the one that ended (None: no epoch follows,
        and the thread ends)."""
        self._epochs.follow_with(batches)

    def close(self) -> None:
        """Stop the threads and wait for them (each finishes the batch it is on)."""
        self._finalizer()


def weak_method(method: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``method`` without a strong reference to its object: a producer thread must not
    keep its owner alive (the owner, once collected, stops the thread)."""
    reference = weakref.WeakMethod(method)

    def call(argument: Any) -> Any:
        bound = reference()
        if bound is None:
            raise ReferenceError("the producer's owner is gone")
        return bound(argument)

    return call


def produce_one(batches: Iterator[Any], prepare: Callable[[Any], tuple[Any, Any]]) -> Produced:
    """The next batch of ``batches``, prepared; never raises (the error is the item's)."""
    item = Produced()
    try:
        batch = next(batches)
    except StopIteration:
        item.end = True
    except Exception as error:  # raised in the training loop at this batch's turn
        item.error = error
    else:
        try:
            item.value, item.event = prepare(batch)
        except Exception as error:
            item.error = error
    return item


class _Epochs:
    """The iterators the thread reads, one epoch after another, and what the owner needs
    to know of the current one: how many batches it gave, and whether it ended."""

    def __init__(self, first: Iterator[Any]) -> None:
        self.current: Iterator[Any] | None = first
        self._condition = threading.Condition()
        self._taken = 0  # batches the current iterator gave
        self._over = False  # the current iterator ended or failed
        self._next: list[Iterator[Any] | None] = []  # the owner's hand-off

    def took(self, item: Produced) -> None:
        with self._condition:
            if item.end:
                self._over = True
            else:  # a batch that failed is one the iterator gave
                self._taken += 1
            self._condition.notify_all()

    def ended_after(self, batches: int, thread: threading.Thread) -> bool:
        with self._condition:
            while not self._over and self._taken <= batches and thread.is_alive():
                self._condition.wait(_POLL_S)
            return self._over and self._taken == batches

    def follow_with(self, batches: Iterator[Any] | None) -> None:
        with self._condition:
            self._next.append(batches)
            self._condition.notify_all()

    def following(self, stop: threading.Event) -> Iterator[Any] | None:
        """The next epoch's iterator, once the owner gives it; None if none follows."""
        with self._condition:
            while not self._next and not stop.is_set():
                self._condition.wait(_POLL_S)
            if stop.is_set():
                return None
            self.current, self._taken, self._over = self._next.pop(0), 0, False
            return self.current


def _thread(target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
    return threading.Thread(target=target, args=args, name=name, daemon=True)


def _unevented(plan: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, Any]]:
    return lambda batch: (plan(batch), None)


def _put(out: queue.Queue[Produced], item: Produced, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_S)
            return
        except queue.Full:
            continue


def _read(
    epochs: _Epochs,
    prepare: Callable[[Any], tuple[Any, Any]],
    out: queue.Queue[Produced],
    stop: threading.Event,
) -> None:
    """Take each batch of each epoch and prepare (or plan) it, in order."""
    batches: Iterator[Any] | None = epochs.current
    while batches is not None and not stop.is_set():
        item = produce_one(batches, prepare)
        epochs.took(item)
        _put(out, item, stop)
        if item.end:
            batches = epochs.following(stop)


def _finish(
    planned: queue.Queue[Produced],
    prepare: Callable[[Any], tuple[Any, Any]],
    out: queue.Queue[Produced],
    stop: threading.Event,
) -> None:
    """Prepare each planned batch, in order; ends and errors pass through."""
    while not stop.is_set():
        try:
            item = planned.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if not item.end and item.error is None:
            try:
                item.value, item.event = prepare(item.value)
            except Exception as error:  # raised in the training loop at this batch's turn
                item.value, item.error = None, error
        _put(out, item, stop)


def _stop(
    threads: list[threading.Thread], queues: list[queue.Queue[Produced]], stop: threading.Event
) -> None:
    stop.set()
    while any(thread.is_alive() for thread in threads):
        for items in queues:
            try:  # make room, so that a put in progress returns
                while True:
                    items.get_nowait()
            except queue.Empty:
                pass
        for thread in threads:
            thread.join(_POLL_S)
