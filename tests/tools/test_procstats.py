"""procstats: CPU seconds of this process's threads, each its own (Linux /proc)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from fastload.tools.diagnostics.procstats import cpu_by_thread_name, thread_cpu

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def test_each_thread_is_charged_its_own_cpu_not_the_process():
    spun, done = threading.Event(), threading.Event()

    def spin() -> None:
        while time.thread_time() < 0.3:  # CPU time, not wall time: a busy machine only delays
            pass
        spun.set()
        done.wait()

    busy = threading.Thread(target=spin)
    idle = threading.Thread(target=done.wait)
    busy.start(), idle.start()
    try:
        assert spun.wait(timeout=60)
        found = thread_cpu([busy.native_id, idle.native_id, 0])
    finally:
        done.set()
        busy.join(), idle.join()
    assert set(found) == {busy.native_id, idle.native_id}  # no thread 0: left out
    assert found[busy.native_id] >= 0.29 and found[idle.native_id] < 0.1


def test_every_thread_is_counted_by_name_native_ones_by_their_own():
    spun, done = threading.Event(), threading.Event()

    def spin() -> None:
        while time.thread_time() < 0.3:
            pass
        spun.set()
        done.wait()

    busy = threading.Thread(target=spin, name="busy")
    busy.start()
    try:
        assert spun.wait(timeout=60)
        named = cpu_by_thread_name({busy.native_id: "busy"})
        alone = cpu_by_thread_name({})
    finally:
        done.set()
        busy.join()
    assert named["busy"] >= 0.29
    # unnamed, every thread is under the name the system keeps for it
    assert "busy" not in alone and all(name.endswith(" (native)") for name in alone)
    assert sum(alone.values()) == pytest.approx(sum(named.values()), abs=0.05)
