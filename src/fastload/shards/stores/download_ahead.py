"""The download-ahead of a shard order: the shards its samples read, brought into the
node's cache in order of first use, a depth ahead of the reader
(:class:`ShardPrefetcher`; :class:`~fastload.shards.order.ShardShuffle` starts one)."""

from __future__ import annotations

import bisect
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

from fastload.shards.format.index import Shard
from fastload.shards.stores.transport import Transport

__all__ = ["PLAN_HORIZON", "ShardPrefetcher", "plan_horizon"]

#: The shards a plan names at least: those being read, then the next ones. Eviction needs
#: no more than the cache holds, and a plan of every shard left, written each time the
#: reader enters one, would cost O(shards) each time: O(shards^2) an epoch.
PLAN_HORIZON = 256


def plan_horizon(cache_limit: int | None, shards: list[Shard]) -> int:
    """How many shards a plan names: :data:`PLAN_HORIZON`, or as many as ``cache_limit``
    holds (shards of the mean size) where that is more."""
    if cache_limit is None or not shards:
        return PLAN_HORIZON
    mean = max(1, sum(shard.size for shard in shards) // len(shards))
    return max(PLAN_HORIZON, cache_limit // mean + 1)


class ShardPrefetcher:
    """Fetches the shards of a sequence of samples into the cache, in order of first use,
    at most ``ahead`` shards past the one the reader has reached (with ``ahead_bytes``:
    the shards past it whose sizes add up to at most that), and keeps the cache's plan
    (the shards read now, then the next ones, :func:`plan_horizon` of them) up to date
    for its eviction."""

    def __init__(
        self,
        transport: Transport,
        shards: list[Shard],
        shards_of_samples: list[int],
        *,
        ahead: int,
        ahead_bytes: int | None = None,
    ) -> None:
        self.transport, self.shards, self.ahead = transport, shards, ahead
        self.ahead_bytes = ahead_bytes
        self.horizon = plan_horizon(transport.cache_limit, shards)
        self.spans: dict[int, list[int]] = {}  # shard -> [first, last] position of use
        for position, shard in enumerate(shards_of_samples):
            self.spans.setdefault(shard, [position, position])[1] = position
        self.first_use = sorted(self.spans, key=lambda shard: self.spans[shard][0])
        self.starts = [self.spans[shard][0] for shard in self.first_use]
        self.first_uses = frozenset(self.starts)
        # bytes of the shards up to and including each, in order of first use
        self.total = list(itertools.accumulate(shards[s].size for s in self.first_use))
        self.position = 0
        self.condition = threading.Condition()
        self.stopped = False
        #: Set once the first fetches have claimed their shards (see :meth:`_run`).
        self.claimed_first = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name="fastload-shard-prefetch", daemon=True
        )
        self.thread.start()

    def reached(self, position: int) -> None:
        """The reader is at ``position`` in the sequence (called for every sample)."""
        if position not in self.first_uses:
            # the depth moves only when the reader enters a shard: waking the thread
            # for every sample would cost two thread switches a sample
            self.position = position
            return
        with self.condition:
            self.position = position
            self.condition.notify()

    def stop(self) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify()
        self.thread.join()
        self.transport.forget_plan()

    def plan(self) -> list[int]:
        """The shards still to be read, ``horizon`` at most: those being read now, then
        by first use."""
        position = self.position
        reached = self._shard_at(position)
        recent = self.first_use[max(0, reached + 1 - self.horizon) : reached + 1]
        now = [s for s in recent if self.spans[s][0] <= position <= self.spans[s][1]]
        return now + self.first_use[reached + 1 : reached + 1 + self.horizon - len(now)]

    def _may_fetch(self, number: int) -> bool:
        """Whether shard ``number`` (in order of first use) is within the depth ahead of
        the shard the reader is in."""
        reached = self._reached_shard()
        if self.ahead_bytes is None:
            return number <= reached + self.ahead
        return number <= reached + 1 or self.total[number] - self.total[reached] <= self.ahead_bytes

    def _run(self) -> None:
        # a download per shard within the depth at once: the readers of a window want
        # all its shards (by bytes: up to 16 at once)
        threads = max(1, self.ahead + 1 if self.ahead_bytes is None else 16)
        pool = ThreadPoolExecutor(threads, thread_name_prefix="fastload-shard-fetch")
        # The fetches started before the reader moves claim their shards (take their
        # locks) before the loader hands out its first index: a worker that reads one
        # then waits for that download instead of starting its own.
        claims: list[threading.Event] | None = []
        announced: list[int] = []
        try:
            for number, shard in enumerate(self.first_use):
                if claims is not None and (len(claims) == threads or not self._may_fetch(number)):
                    self._all_claimed(claims)
                    claims = None
                with self.condition:
                    while not self.stopped and not self._may_fetch(number):
                        self.condition.wait()
                    if self.stopped:
                        return
                    plan = self.plan()
                if plan != announced:  # it moves with the reader, not with each fetch
                    self.transport.plan([self.shards[number].name for number in plan])
                    announced = plan
                claim = threading.Event()
                if claims is not None:
                    claims.append(claim)
                pool.submit(self._fetch, shard, plan.index(shard) if shard in plan else 0, claim)
            if claims is not None:
                self._all_claimed(claims)
        finally:
            self.claimed_first.set()  # (stopped or failed: the reader waits no longer)
            # stop() (a break, an error in the loop) waits for no download: those not
            # started are dropped, those under way finish in the background
            pool.shutdown(wait=False, cancel_futures=self.stopped)

    def _all_claimed(self, claims: list[threading.Event]) -> None:
        for claim in claims:
            claim.wait()
        self.claimed_first.set()

    def _fetch(self, shard: int, use: int, claim: threading.Event) -> None:
        try:
            self.transport.prefetch(self.shards[shard], use, claimed=claim.set)
        except Exception:  # the worker that reads it fetches it again and says why
            return
        finally:
            claim.set()

    def _reached_shard(self) -> int:
        """The number (in order of first use) of the shard the reader is in."""
        return self._shard_at(self.position)

    def _shard_at(self, position: int) -> int:
        """The number (in order of first use) of the last shard first used by ``position``."""
        return max(0, bisect.bisect_right(self.starts, position) - 1)
