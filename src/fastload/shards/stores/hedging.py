"""Hedged reads: a ranged GET slower than most recent ones is asked again, on another
connection, and the first complete answer wins, as AWS's guidance for S3 advises (retry
the slowest requests early; a stalled connection otherwise waits out its timeout).

A request is hedged once it has run longer than ``max(floor_s, 3 x the median of the
last 200 requests)``: the median, not a high percentile, as a store that throttles one
request in ten would push a high percentile past every stall. Hedges are capped at
``budget`` of the requests made through one :class:`Hedged` (5 %: a slow store is not
asked twice as hard; the first hedge allowed at once, for a stalled first request) and
counted. A process has one; through obstore, each of its store processes.
Standard library only: the store process (:mod:`~fastload.shards.stores.obstore_process`)
imports it too.

Example:
    >>> hedge = Hedged(parallel=2)
    >>> hedge.call(lambda: b"bytes")
    b'bytes'
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["Hedged"]

T = TypeVar("T")
_WINDOW = 200  # recent latencies the threshold is taken from
_FIRST = 20  # requests before the percentile means anything: the floor alone until then


class Hedged:
    """Calls, each asked again once it runs past the hedging threshold (see the module)."""

    def __init__(
        self, parallel: int, *, floor_s: float = 0.5, budget: float = 0.05, enabled: bool = True
    ) -> None:
        self.floor_s, self.budget, self.enabled = floor_s, budget, enabled
        self.counts = {"requests": 0, "hedged": 0, "hedge won": 0}
        self._latencies: deque[float] = deque(maxlen=_WINDOW)
        self._lock = threading.Lock()
        # two attempts per caller at most: its own thread waits, these run them
        self._attempts = ThreadPoolExecutor(2 * parallel, thread_name_prefix="fastload-hedge")

    def threshold(self) -> float:
        """How long a request runs before it is asked again."""
        with self._lock:
            if len(self._latencies) < _FIRST:
                return self.floor_s
            ordered = sorted(self._latencies)
        return max(self.floor_s, 3 * ordered[len(ordered) // 2])

    def _may_hedge(self) -> bool:
        with self._lock:
            allowed = self.budget * max(self.counts["requests"], 1 / self.budget)
            if not self.enabled or self.counts["hedged"] + 1 > allowed:
                return False
            self.counts["hedged"] += 1
            return True

    def call(self, request: Callable[[], T]) -> T:
        """``request()``'s answer: the first complete one of at most two attempts (an
        attempt that raises leaves the other to answer; both raising, the first attempt's
        error)."""
        with self._lock:
            self.counts["requests"] += 1
        started = time.perf_counter()
        first = self._attempts.submit(request)
        done, _ = wait([first], timeout=self.threshold())
        if done or not self._may_hedge():
            answer = first.result()
            self._record(time.perf_counter() - started)
            return answer
        second = self._attempts.submit(request)
        pending: set[Future[T]] = {first, second}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for attempt in (first, second):  # in this order where both are done
                if attempt in done and attempt.exception() is None:
                    if attempt is second:
                        with self._lock:
                            self.counts["hedge won"] += 1
                    self._record(time.perf_counter() - started)
                    return attempt.result()
        error = first.exception()  # both failed: the request's own error
        assert error is not None
        raise error

    def _record(self, seconds: float) -> None:
        with self._lock:
            self._latencies.append(seconds)
