"""CPU seconds and memory of this process and its workers, read from /proc (Linux)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "children", "cpu_by_thread_name", "cpu_seconds_with_workers", "process_cpu", "rss_bytes",
    "thread_cpu",
]  # fmt: skip


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        found = []
        for task in tasks:
            found += [int(c) for c in (task / "children").read_text().split()]
        return found
    except OSError:  # not Linux, or a process gone
        return []


def _cpu_seconds(pid: int, folder: str = "/proc") -> float | None:
    try:
        fields = Path(f"{folder}/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def rss_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def thread_cpu(native_ids: Sequence[int]) -> dict[int, float]:
    """CPU seconds used so far by each of this process's threads ``native_ids`` (Linux;
    empty elsewhere). ``/proc/<id>/stat`` of a thread counts its whole process: each
    thread's own are under ``/proc/self/task``."""
    return {
        tid: cpu for tid in native_ids if (cpu := _cpu_seconds(tid, "/proc/self/task")) is not None
    }


def cpu_by_thread_name(names: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds used so far by every thread of this process, summed by name: ``names``
    (native id -> name, say Python's threads') where it has the thread, else the name the
    system keeps for it (``comm``: OpenMP's, CUDA's, a library's own threads) marked
    ``(native)``. Linux; empty elsewhere."""
    found: dict[str, float] = {}
    try:
        tasks = [int(task.name) for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return found
    for tid, cpu in thread_cpu(tasks).items():
        name = names.get(tid)
        if name is None:
            try:
                name = Path(f"/proc/self/task/{tid}/comm").read_text().strip() + " (native)"
            except OSError:  # ended since
                continue
        found[name] = found.get(name, 0.0) + cpu
    return found


def process_cpu(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds used so far by each of ``pids`` (Linux; empty elsewhere)."""
    return {pid: cpu for pid in pids if (cpu := _cpu_seconds(pid)) is not None}


def cpu_seconds_with_workers() -> float:
    """CPU seconds of this process, of its finished child processes and of the live ones
    (persistent DataLoader workers are only counted by ``getrusage`` once they exit)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(process_cpu(children(os.getpid())).values())
    return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime + live
