"""The worker count, prefetch depth and shared-memory check that FastLoader fills in."""

from __future__ import annotations

import os

import torch.distributed as dist

from fastload.system import available_cpus

__all__ = [
    "MAX_AUTO_WORKERS",
    "MIN_BATCHES_IN_FLIGHT",
    "MIN_SHARED_MEMORY",
    "auto_num_workers",
    "local_processes",
    "shared_memory_free",
    "small_shared_memory",
]


#: Upper bound of ``num_workers='auto'`` per training process. The folklore is 4 per GPU;
#: JPEG decoding and CPU augmentation for one modern GPU need more, and beyond 8 the
#: shared-memory traffic and start-up time usually cost more than they bring.
MAX_AUTO_WORKERS = 8


#: Batches buffered across all workers. With one or two workers a single slow batch
#: would otherwise stall the training loop.
MIN_BATCHES_IN_FLIGHT = 4


#: Below this much free /dev/shm, workers are not started by 'auto': batches travel from
#: workers through shared memory, and running out of it kills a worker with SIGBUS.
#: Docker gives containers 64 MiB unless told otherwise.
MIN_SHARED_MEMORY = 256 << 20


def shared_memory_free() -> int | None:
    """Free bytes in /dev/shm, where worker batches go; None where there is none."""
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def small_shared_memory() -> str | None:
    """Why workers would crash for lack of shared memory, with the fix; else None."""
    free = shared_memory_free()
    if free is None or free >= MIN_SHARED_MEMORY:
        return None
    return (
        f"only {free >> 20} MiB free in /dev/shm, and workers pass batches through it "
        "(running out kills them with a bus error); in Docker, run with --shm-size=8g or "
        "--ipc=host"
    )


def local_processes() -> int:
    """Training processes on this machine: torchrun's LOCAL_WORLD_SIZE, else 1."""
    if dist.is_available() and dist.is_initialized():
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return 1


def auto_num_workers(*, cpus: int | None = None, local_world_size: int | None = None) -> int:
    """The worker count FastLoader picks for ``num_workers='auto'`` on a disk-backed dataset.

    ``min(cpus // local_world_size, 8)``, at least 1: the CPUs this process may run on
    (``os.sched_getaffinity``, which respects taskset, cgroups and SLURM) shared among
    the training processes of this machine, capped at :data:`MAX_AUTO_WORKERS`.

    Example:
        >>> auto_num_workers(cpus=32, local_world_size=8)
        4
    """
    cpus = available_cpus() if cpus is None else cpus
    local_world_size = local_processes() if local_world_size is None else local_world_size
    return max(1, min(cpus // max(1, local_world_size), MAX_AUTO_WORKERS))
