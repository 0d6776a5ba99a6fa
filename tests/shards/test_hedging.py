"""Hedged reads: a request whose bytes stop for the threshold is asked again and the
first answer wins, within a budget of hedges; one whose bytes keep coming is not. Requests
here block on events, and where silence is asserted a clock the test moves tells it, so
that what is asserted never depends on how fast the machine is."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from common_utils import FakeClock
from fastload.shards.stores.hedging import Hedged


class Blocking:
    """A request whose first attempt blocks until ``release`` is set; later ones answer
    at once with their attempt's number."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.attempts = 0
        self._lock = threading.Lock()

    def __call__(self, heard) -> int:
        heard()  # a first piece, then silence
        with self._lock:
            self.attempts += 1
            attempt = self.attempts
        if attempt == 1:
            self.release.wait()
        return attempt


def test_a_request_silent_past_the_threshold_is_answered_by_its_hedge():
    hedged, request = Hedged(parallel=2, floor_s=0.01), Blocking()
    try:
        assert hedged.call(request) == 2  # the first attempt is still blocked
    finally:
        request.release.set()
    assert hedged.counts == {"requests": 1, "hedged": 1, "hedge won": 1}


def until(condition) -> None:
    """Waits (a poll, no deadline) until ``condition()`` holds."""
    while not condition():
        time.sleep(0.001)


def test_a_request_whose_bytes_keep_coming_is_never_hedged_however_long_it_runs():
    clock, attempts = FakeClock(), []
    hedged = Hedged(parallel=2, floor_s=0.05, budget=1.0, clock=clock)

    def slow_but_sending(heard) -> str:
        attempts.append(1)
        for _ in range(100):  # 20 thresholds in all, a piece every fifth of one
            clock.advance(0.01)
            heard()
            time.sleep(0.002)  # (the waiting caller looks in on it meanwhile)
        return "whole"

    assert hedged.call(slow_but_sending) == "whole"
    assert attempts == [1] and hedged.counts == {"requests": 1, "hedged": 0, "hedge won": 0}
    assert list(hedged._silences) == [pytest.approx(0.01)]  # its longest silence, not 1 s


def test_a_request_queued_for_a_thread_is_not_silent_while_it_waits():
    clock, busy, ran = FakeClock(), [Blocking(), Blocking()], []
    hedged = Hedged(parallel=1, floor_s=0.05, budget=1.0, clock=clock)

    def queued(heard) -> str:
        ran.append(1)
        return "ran once"

    with ThreadPoolExecutor(3) as callers:
        try:
            for request in busy:  # both threads of first attempts taken
                callers.submit(hedged.call, request)
            until(lambda: all(request.attempts == 1 for request in busy))
            answer = callers.submit(hedged.call, queued)
            until(lambda: hedged.counts["requests"] == 3)
            clock.advance(1.0)  # 20 thresholds: the busy ones are hedged, the queued one not
            until(lambda: all(request.attempts == 2 for request in busy))
        finally:
            for request in busy:
                request.release.set()
        assert answer.result() == "ran once" and ran == [1]
    assert hedged.counts["hedged"] == 2  # the two busy ones' alone


def test_a_hedge_is_not_queued_behind_first_attempts():
    clock, busy, request = FakeClock(), Blocking(), Blocking()
    hedged = Hedged(parallel=1, floor_s=0.05, budget=1.0, clock=clock)
    with ThreadPoolExecutor(2) as callers:
        try:
            answers = [callers.submit(hedged.call, busy)]
            until(lambda: busy.attempts == 1)
            answers.append(callers.submit(hedged.call, request))
            until(lambda: request.attempts == 1)  # both threads of first attempts blocked
            clock.advance(1.0)
            # both answered by hedges while the first attempts still block (a bound for a
            # build whose hedges queue behind them, which would never answer)
            done, _ = wait(answers, timeout=60)
            assert [answer.result() for answer in done] == [2, 2]
        finally:
            busy.release.set()
            request.release.set()


def test_hedges_stay_within_their_budget():
    hedged = Hedged(parallel=2, floor_s=0.01, budget=0.05)  # 1 hedge in the first 20
    first, second = Blocking(), Blocking()
    try:
        assert hedged.call(first) == 2
        threading.Timer(0.05, second.release.set).start()  # no hedge left: it waits
        assert hedged.call(second) == 1
    finally:
        first.release.set()
        second.release.set()
    assert hedged.counts == {"requests": 2, "hedged": 1, "hedge won": 1}
    for _ in range(38):
        hedged.call(lambda heard: 0)
    assert hedged._may_hedge()  # 40 requests: a second hedge is within 5 %


def test_an_attempt_that_fails_leaves_the_other_to_answer_and_both_failing_raise():
    hedged = Hedged(parallel=2, floor_s=0.01, budget=1.0)

    def request_where_the_hedge_frees_the_first(first_says: str, hedge_says: str | None):
        """The first attempt blocks until the hedge ran, then fails: no clock decides."""
        hedge_ran, calls = threading.Event(), []

        def request(heard) -> str:
            calls.append(1)
            if len(calls) == 1:
                hedge_ran.wait()
                raise OSError(first_says)
            hedge_ran.set()
            if hedge_says is None:
                raise OSError("the hedge's error")
            return hedge_says

        return request

    assert hedged.call(request_where_the_hedge_frees_the_first("slow, then failed", "hedge")) == (
        "hedge"
    )
    with pytest.raises(OSError, match="the first attempt's error"):  # both failed
        hedged.call(request_where_the_hedge_frees_the_first("the first attempt's error", None))


def test_disabled_it_never_asks_twice():
    hedged, request = Hedged(parallel=2, floor_s=0.01, enabled=False), Blocking()
    threading.Timer(0.05, request.release.set).start()
    assert hedged.call(request) == 1
    assert hedged.counts == {"requests": 1, "hedged": 0, "hedge won": 0}


def test_the_threshold_is_the_floor_until_there_are_enough_latencies():
    hedged = Hedged(parallel=1, floor_s=0.5)
    assert hedged.threshold() == 0.5
    for seconds in [0.1] * 15 + [2.0] * 5:  # a quarter throttled: the median is 0.1
        hedged._record(seconds)
    assert hedged.threshold() == 0.5
    for seconds in [1.0] * 21:
        hedged._record(seconds)
    assert hedged.threshold() == 3.0  # three times the median, past the floor
