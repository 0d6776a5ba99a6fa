"""Batches prepared on a background thread, so the training thread only waits on an event.

A :class:`Producer` takes each batch from an iterator, runs ``prepare`` on it (decode,
augment, normalise: on the producer's own CUDA stream, made once by its owner), records
an event, and queues the result, at most ``depth`` ahead. The training thread takes
them in order; an exception is queued at its batch's turn. The thread ends with the
iterator, at the first error, or at :meth:`Producer.close`, which the owner calls when a
pass ends early (a ``break``, an exception, garbage collection, interpreter exit).
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
    :class:`Produced` items in order; the last one has ``end`` or ``error`` set.

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
        name: str = "fastload-producer",
    ) -> None:
        self._queue: queue.Queue[Produced] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_run, args=(batches, prepare, self._queue, self._stop), name=name, daemon=True
        )
        self._thread.start()
        # A producer nobody closed (its owner collected, the interpreter exiting) still stops.
        self._finalizer = weakref.finalize(self, _stop, self._thread, self._queue, self._stop)

    def __iter__(self) -> Iterator[Produced]:
        while True:
            item = self.get()
            yield item
            if item.end or item.error is not None:
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

    def close(self) -> None:
        """Stop the thread and wait for it (it finishes the batch it is preparing)."""
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


def _run(
    batches: Iterator[Any],
    prepare: Callable[[Any], tuple[Any, Any]],
    out: queue.Queue[Produced],
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        item = produce_one(batches, prepare)
        while not stop.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        if item.end or item.error is not None:
            return


def _stop(thread: threading.Thread, items: queue.Queue[Produced], stop: threading.Event) -> None:
    stop.set()
    while thread.is_alive():
        try:  # make room, so that a put in progress returns
            while True:
                items.get_nowait()
        except queue.Empty:
            pass
        thread.join(_POLL_S)
