"""What this machine offers fastload: CPUs to use, the device to put batches on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

__all__ = ["available_cpus", "default_device", "one_thread"]


def available_cpus() -> int:
    """CPUs this process may run on: ``os.sched_getaffinity``, which respects taskset,
    cgroups and SLURM; ``os.cpu_count()`` where there is no affinity API (macOS)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_device() -> torch.device:
    """The current CUDA device (with its index) where CUDA is available, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op parallelism off for the block (cheap to set and restore)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
