"""What the local servers of :mod:`fastload.testing` share: a free port, the wait until a
started server answers (or says why it never will), and its stop.

Example::

    port = free_port()
    process = subprocess.Popen(["server", "--port", str(port)])
    wait_until_it_answers(lambda: probe(port), [process], "the server", logs=folder)
    stop([process])
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["free_port", "stop", "wait_until_it_answers"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_it_answers(
    answers: Callable[[], object],
    processes: Sequence[subprocess.Popen[bytes]],
    what: str,
    *,
    logs: Path | None = None,
    timeout: float = 60.0,
) -> None:
    """Call ``answers`` until it returns without an exception; a process of the server
    that ended, or ``timeout`` seconds, is a RuntimeError with the last error and the
    ends of the ``*.log`` files in ``logs``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answers()
            return
        except Exception as error:
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                found = {p.name: p.read_text(errors="replace")[-500:]
                         for p in (logs.glob("*.log") if logs else [])}  # fmt: skip
                raise RuntimeError(f"{what} did not start ({error}): {found}") from None
            time.sleep(0.1)


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Terminate them, and kill those still running after 10 s."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
