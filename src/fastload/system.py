"""What this machine offers fastload: CPUs to use, the device to put batches on."""

from __future__ import annotations

import os

import torch

__all__ = ["available_cpus", "default_device"]


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
