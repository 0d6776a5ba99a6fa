"""Helpers shared by the tests (as torchvision's tests/common_utils.py)."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def cpu_and_cuda() -> list:
    """Device parameters: every device test runs on CPU here and on CUDA where present
    (the ``needs_cuda`` mark is skipped by conftest.py without CUDA)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.needs_cuda)]


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: what must never wait forever raises after ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_script(path: Path, *args: str) -> str:
    """Run ``python path args`` in this process and return what it printed: the same code
    path as a new interpreter, without importing torch again (seconds a run). An exit
    status other than 0 raises."""
    argv, sys.argv = sys.argv, [str(path), *args]
    search = list(sys.path)
    sys.path.insert(0, str(Path(path).resolve().parent))  # as the interpreter puts it first
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            message = f"{path.name} exited with {stop.code}: {out.getvalue()[-2000:]}"
            raise AssertionError(message) from None
    finally:
        sys.argv, sys.path[:] = argv, search
    return out.getvalue()


#: ``python -c KILLED_CONVERSION FOLDER DESTINATION [OPTIONS_JSON]``: write_shards of the
#: image folder (with those storage options), the process killed with SIGKILL when it
#: reads image 11 (after a few finished shards).
KILLED_CONVERSION = textwrap.dedent(
    """
    import json, os, signal, sys
    from fastload import ImageFolder
    from fastload.shards import write_shards

    read = ImageFolder.__getitem__

    def killed_at_11(self, index):  # the same class as the resume's: the same source
        if index == 11:
            os.kill(os.getpid(), signal.SIGKILL)
        return read(self, index)

    ImageFolder.__getitem__ = killed_at_11
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    write_shards(ImageFolder(sys.argv[1], decode="numpy"), sys.argv[2], shard_size=20_000,
                 storage_options=options)
    """
)


def resumed_rest(make: Callable[[], Any], taken: int) -> tuple[list, list]:
    """The batches after the first ``taken`` of an epoch of ``make()`` (a FastLoader or a
    DataPrefetcher), as it goes on, and as a fresh one resumed from the state saved there
    gives them."""
    loader = make()
    batches = iter(loader)
    for _ in range(taken):
        next(batches)
    state = loader.state_dict()
    rest = list(batches)
    resumed = make()
    resumed.load_state_dict(state)
    return rest, list(resumed)


class FakeClock:
    """perf_counter that only moves when told: exact timings in tests."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def script_outcome(script: str, *args: str, env: dict[str, str] | None = None) -> tuple:
    """``(exit status, stdout, stderr)`` of ``python -c script args`` in a new interpreter
    (its exit included: what it prints as the modules are cleared), within 120 s."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr
