"""Hedged reads: a ranged GET whose bytes stop coming is asked again, on another
connection, and the first complete answer wins, as AWS's guidance for S3 advises (retry
the slowest requests early; a stalled connection otherwise waits out its timeout).

A request is hedged once no byte of it has arrived for ``max(floor_s, 3 x the median of
the longest silences of the last 200 requests)`` (a silence: the wait for the first
byte, or between two reads of the body). Silence, not the whole request's time: on a
link the downloads fill, a large body is slow because the link is shared, and asking
for it again would only share the link once more; a stalled connection is silent. The
median, not a high percentile, as a store that throttles one request in ten would push
a high percentile past every stall. Hedges are capped at ``budget`` of the requests made
through one :class:`Hedged` (5 %: a slow store is not asked twice as hard; the first
hedge allowed at once, for a stalled first request) and counted. A process has one;
through obstore, each of its store processes.
Standard library only: the store process (:mod:`~fastload.shards.stores.obstore_process`)
imports it too.

Example:
    >>> hedge = Hedged(parallel=2)
    >>> def request(heard):  # heard() as each piece of the body arrives
    ...     heard()
    ...     return b"bytes"
    >>> hedge.call(request)
    b'bytes'
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["Hedged", "Silence"]

T = TypeVar("T")
_WINDOW = 200  # recent silences the threshold is taken from
_FIRST = 20  # requests before the median means anything: the floor alone until then


class Silence:
    """How long an attempt has gone without a byte: :meth:`begin` when it starts to run
    (time queued for a thread is not silence), :meth:`heard` as each byte arrives."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.last: float | None = None
        self.longest = 0.0

    def begin(self) -> None:
        self.last = self.clock()

    def heard(self) -> None:
        now = self.clock()
        assert self.last is not None, "heard before begin"
        self.longest = max(self.longest, now - self.last)
        self.last = now

    def current(self) -> float:
        """Seconds since the last byte (or the start; 0 while it waits to start)."""
        last = self.last
        return 0.0 if last is None else self.clock() - last

    def ended(self) -> float:
        """The longest silence, the one up to now included."""
        return max(self.longest, self.current())


class Hedged:
    """Calls, each asked again once its bytes stop past the threshold (see the module);
    ``clock`` tells the silences (a test gives its own)."""

    def __init__(
        self,
        parallel: int,
        *,
        floor_s: float = 0.5,
        budget: float = 0.05,
        enabled: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.floor_s, self.budget, self.enabled, self.clock = floor_s, budget, enabled, clock
        self.counts = {"requests": 0, "hedged": 0, "hedge won": 0}
        self._silences: deque[float] = deque(maxlen=_WINDOW)
        self._lock = threading.Lock()
        # the callers' threads wait, these run their attempts: first attempts up to
        # 2 x parallel at once (callers past that queue), hedges beside them, never
        # queued behind first attempts
        self._attempts = ThreadPoolExecutor(2 * parallel, thread_name_prefix="fastload-attempt")
        self._hedges = ThreadPoolExecutor(parallel, thread_name_prefix="fastload-hedge")

    def threshold(self) -> float:
        """How long a request goes without a byte before it is asked again."""
        with self._lock:
            if len(self._silences) < _FIRST:
                return self.floor_s
            ordered = sorted(self._silences)
        return max(self.floor_s, 3 * ordered[len(ordered) // 2])

    def _may_hedge(self) -> bool:
        with self._lock:
            allowed = self.budget * max(self.counts["requests"], 1 / self.budget)
            if not self.enabled or self.counts["hedged"] + 1 > allowed:
                return False
            self.counts["hedged"] += 1
            return True

    def call(self, request: Callable[[Callable[[], None]], T]) -> T:
        """``request(heard)``'s answer, where the request calls ``heard()`` as each piece
        of its body arrives: the first complete answer of at most two attempts (an attempt
        that raises leaves the other to answer; both raising, the first attempt's error)."""
        with self._lock:
            self.counts["requests"] += 1
        silence = Silence(self.clock)
        first = self._attempts.submit(_attempt, request, silence)
        if self._done_before_silent(first, silence) or not self._may_hedge():
            answer = first.result()
            self._record(silence.ended())
            return answer
        hedge_silence = Silence(self.clock)
        second = self._hedges.submit(_attempt, request, hedge_silence)
        pending: set[Future[T]] = {first, second}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for attempt in (first, second):  # in this order where both are done
                if attempt in done and attempt.exception() is None:
                    if attempt is second:
                        with self._lock:
                            self.counts["hedge won"] += 1
                    self._record((silence if attempt is first else hedge_silence).ended())
                    return attempt.result()
        error = first.exception()  # both failed: the request's own error
        assert error is not None
        raise error

    def _done_before_silent(self, attempt: Future[T], silence: Silence) -> bool:
        """Waits for ``attempt`` while its bytes keep coming: True once it is done, False
        once it has been silent for the threshold."""
        threshold = self.threshold()
        while (left := threshold - silence.current()) > 0:
            done, _ = wait([attempt], timeout=left)
            if done:
                return True
        return attempt.done()

    def _record(self, seconds: float) -> None:
        with self._lock:
            self._silences.append(seconds)


def _attempt(request: Callable[[Callable[[], None]], T], silence: Silence) -> T:
    silence.begin()
    return request(silence.heard)
