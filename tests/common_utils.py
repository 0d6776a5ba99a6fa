"""Helpers shared by the tests (as torchvision's tests/common_utils.py)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

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
