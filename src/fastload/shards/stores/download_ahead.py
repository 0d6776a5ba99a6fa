"""The download-ahead of a shard order: the shards its samples read, brought into the
node's cache in order of first use, a depth ahead of the reader (:class:`DownloadAhead`).
:meth:`~fastload.shards.ShardedDataset.fetch_ahead` starts one for the order the loader
has from its sampler, and the loader says how far it has handed that order out."""

from __future__ import annotations

import bisect
import itertools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastload.shards.format.index import Shard
from fastload.shards.stores.transport import Transport

__all__ = [
    "CLAIM_WAIT_S",
    "DEEPEST",
    "PLAN_HORIZON",
    "START_DEPTH",
    "DownloadAhead",
    "deepest",
    "download_ahead",
    "plan_horizon",
]

#: At most this long the reader waits for the download-ahead to claim its first shards
#: (a bound: claiming takes a lock, or finds it held, at once).
CLAIM_WAIT_S = 10.0

#: The shards a plan names at least: those being read, then the next ones. Eviction needs
#: no more than the cache holds, and a plan of every shard left, written each time the
#: reader enters one, would cost O(shards) each time: O(shards^2) an epoch.
PLAN_HORIZON = 256


#: The depth a download-ahead starts at when the dataset leaves it to the link
#: (``download_ahead=None``), and the most it grows to (:class:`DownloadAhead`).
START_DEPTH, DEEPEST = 8, 32


def deepest(cache_limit: int | None, shards: list[Shard]) -> int:
    """The most a depth left to the link grows to: :data:`DEEPEST`, or, under
    ``cache_limit``, half the shards (of the mean size) it holds, the other half left to
    the shards being read (never below :data:`START_DEPTH`)."""
    if cache_limit is None or not shards:
        return DEEPEST
    return max(START_DEPTH, min(DEEPEST, cache_limit // _mean_size(shards) // 2))


def plan_horizon(cache_limit: int | None, shards: list[Shard]) -> int:
    """How many shards a plan names: :data:`PLAN_HORIZON`, or as many as ``cache_limit``
    holds (shards of the mean size) where that is more."""
    if cache_limit is None or not shards:
        return PLAN_HORIZON
    return max(PLAN_HORIZON, cache_limit // _mean_size(shards) + 1)


def _mean_size(shards: list[Shard]) -> int:
    """The shards' mean size in bytes (at least 1), for how many a cache limit holds."""
    return max(1, sum(shard.size for shard in shards) // len(shards))


class DownloadAhead:
    """Fetches the shards of a sequence of samples into the cache, in order of first use,
    at most ``ahead`` shards past the one the reader has reached (with ``ahead_bytes``:
    the shards past it whose sizes add up to at most that), and keeps the cache's plan
    (the shards read now, then the next ones, :func:`plan_horizon` of them) up to date
    for its eviction. A shard the cache holds already is passed over, counted as
    downloaded: a warm pass fetches, locks and claims nothing.

    With ``grows_to`` above ``ahead``, the depth follows the link: each time the reader
    enters a shard whose download has not ended, the depth grows by one, up to
    ``grows_to``. Downloads stay ahead once the shards in flight cover one download's
    time at the reader's pace (Little's law): on a long link that time is many round
    trips of a connection's slow start, not one, so the depth it needs grows with the
    latency more than with the bandwidth. The shards the pass starts with are not
    counted: started together, they end together whatever the depth."""

    def __init__(
        self,
        transport: Transport,
        shards: list[Shard],
        shards_of_samples: list[int],
        *,
        ahead: int,
        ahead_bytes: int | None = None,
        grows_to: int | None = None,
    ) -> None:
        self.transport, self.shards, self.ahead = transport, shards, ahead
        self.ahead_bytes = ahead_bytes
        self.grows_to = ahead if grows_to is None or ahead_bytes is not None else grows_to
        self._first_wave = ahead  # (in order of first use) the shards started together
        #: (In order of first use) the shards whose downloads have ended.
        self.ended: set[int] = set()
        self.horizon = plan_horizon(transport.cache_limit, shards)
        self.spans: dict[int, list[int]] = {}  # shard -> [first, last] position of use
        for position, shard in enumerate(shards_of_samples):
            self.spans.setdefault(shard, [position, position])[1] = position
        self.first_use = sorted(self.spans, key=lambda shard: self.spans[shard][0])
        self.starts = [self.spans[shard][0] for shard in self.first_use]
        # bytes of the shards up to and including each, in order of first use
        self.total = list(itertools.accumulate(shards[s].size for s in self.first_use))
        self.position = 0
        self._reached = 0  # the shard (in order of first use) at `position`
        self.condition = threading.Condition()
        self.stopped = False
        #: Set once the first fetches have claimed their shards (see :meth:`_run`).
        self.claimed_first = threading.Event()
        # a download per shard within the depth at once: the readers of a window want
        # all its shards (by bytes: up to 16 at once)
        self._threads = max(1, self.grows_to + 1 if ahead_bytes is None else 16)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="fastload-shard-fetch")
        self.thread = threading.Thread(
            target=self._run, name="fastload-download-ahead", daemon=True
        )
        self.thread.start()

    def reached(self, position: int) -> None:
        """The reader has been handed the sequence up to ``position`` (called for every
        sample, or for the last of each batch)."""
        shard = self._shard_at(position)
        if shard == self._reached:
            # the depth moves only when the reader enters a shard: waking the thread
            # for every sample would cost two thread switches a sample
            self.position = position
            return
        with self.condition:
            self.position, self._reached = position, shard
            late = shard > self._first_wave and shard not in self.ended
            if late and self.ahead < self.grows_to:
                self.ahead += 1
            self.condition.notify()

    def stop(self, _exiting: Callable[[], bool] = sys.is_finalizing) -> None:
        # (bound here: at interpreter exit, a pass left unfinished is stopped after the
        # modules' globals are cleared, and the pool's threads were already joined)
        if _exiting():
            self.stopped = True
            return
        with self.condition:
            self.stopped = True
            self.condition.notify()
        self.thread.join()
        # the downloads not started are dropped (the loop may have ended before the
        # stop, its last ones still queued), those under way finish in the background
        self._pool.shutdown(wait=False, cancel_futures=True)
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
        reached = self._reached
        if self.ahead_bytes is None:
            return number <= reached + self.ahead
        return number <= reached + 1 or self.total[number] - self.total[reached] <= self.ahead_bytes

    def _run(self) -> None:
        threads = self._threads
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
                if self.transport.cached(self.shards[shard]):
                    # a warm pass: nothing to fetch or claim (the lock, the hash and the
                    # stamp of a fetch would cost the reader's time shard by shard)
                    self.ended.add(number)
                    continue
                claim = threading.Event()
                if claims is not None:
                    claims.append(claim)
                use = plan.index(shard) if shard in plan else 0
                self._pool.submit(self._fetch, number, use, claim)
            if claims is not None:
                self._all_claimed(claims)
        finally:
            self.claimed_first.set()  # (stopped or failed: the reader waits no longer)
            self._pool.shutdown(wait=False, cancel_futures=self.stopped)

    def _all_claimed(self, claims: list[threading.Event]) -> None:
        for claim in claims:
            claim.wait()
        self.claimed_first.set()

    def _fetch(self, number: int, use: int, claim: threading.Event) -> None:
        """Fetch the ``number``-th shard in order of first use."""
        try:
            self.transport.prefetch(self.shards[self.first_use[number]], use, claimed=claim.set)
        except Exception:  # the worker that reads it fetches it again and says why
            return
        finally:
            claim.set()
            self.ended.add(number)

    def _shard_at(self, position: int) -> int:
        """The number (in order of first use) of the last shard first used by ``position``."""
        return max(0, bisect.bisect_right(self.starts, position) - 1)


def download_ahead(
    transport: Transport,
    shards: list[Shard],
    starts: list[int],
    order: list[int],
    *,
    ahead: int,
    ahead_bytes: int | None = None,
    grows_to: int | None = None,
) -> DownloadAhead:
    """A :class:`DownloadAhead` of ``order``'s samples (``starts``: each shard's first
    sample index), once its first downloads have claimed their shards: a worker that reads
    one of them then waits for that download instead of starting its own."""
    # the order's indices are in range: a bisect each, not shard_of's checks
    shards_of_samples = [bisect.bisect_right(starts, index) - 1 for index in order]
    downloads = DownloadAhead(
        transport, shards, shards_of_samples, ahead=ahead, ahead_bytes=ahead_bytes,
        grows_to=grows_to,
    )  # fmt: skip
    downloads.claimed_first.wait(CLAIM_WAIT_S)
    return downloads
