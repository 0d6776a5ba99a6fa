"""What FastLoader fills in, decided by a pure function of the arguments and the machine:
:func:`choose_defaults` (worker count, pinning, persistence, prefetch depth, a
DistributedSampler), with the facts it reads in :class:`Machine`.

Example:
    >>> machine = Machine(cuda=True, cpus=32, local_processes=8, shm_shortage=None,
    ...                   distributed=False)
    >>> chosen = choose_defaults(num_workers="auto", machine=machine)
    >>> chosen.num_workers, chosen.pin_memory, chosen.persistent_workers, chosen.prefetch_factor
    (4, True, True, 2)
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from fastload.system import available_cpus

__all__ = [
    "AUTO",
    "MAX_AUTO_WORKERS",
    "MIN_BATCHES_IN_FLIGHT",
    "MIN_SHARED_MEMORY",
    "TUNE",
    "Defaults",
    "Machine",
    "auto_num_workers",
    "check_num_workers",
    "choose_defaults",
    "choose_fetch",
    "describe_choices",
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


#: What launchers set to the number of training processes on this machine: torchrun's,
#: Open MPI's, MPICH's and Intel MPI's, SLURM's (which may read "8(x2)").
LOCAL_SIZE_VARIABLES = (
    "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
)  # fmt: skip


def local_processes() -> int:
    """Training processes on this machine, under an initialised process group: what the
    launcher says (:data:`LOCAL_SIZE_VARIABLES`), else the whole world size. Lightning's
    launcher sets none of them; counting every process as local can give fewer workers
    than the cores allow on several machines, never more than the cores on one."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    for name in LOCAL_SIZE_VARIABLES:
        count = re.match(r"\d+", os.environ.get(name, ""))
        if count is not None:
            return max(1, int(count.group()))
    return max(1, dist.get_world_size())


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


AUTO, TUNE = "auto", "tune"

# DataLoader's own wording first: code that matches on it keeps working.
_NUM_WORKERS_ERROR = (
    "num_workers option should be non-negative; "
    "fastload takes a non-negative int, 'auto' or 'tune', got {!r}"
)


def check_num_workers(num_workers: object) -> None:
    """Refuse anything but a non-negative int, ``'auto'`` or ``'tune'``."""
    if isinstance(num_workers, str):
        valid = num_workers in (AUTO, TUNE)
    else:
        valid = isinstance(num_workers, int) and not isinstance(num_workers, bool)
        valid = valid and num_workers >= 0  # type: ignore[operator]
    if not valid:
        raise ValueError(_NUM_WORKERS_ERROR.format(num_workers))


@dataclass(frozen=True)
class Machine:
    """The facts about this machine and process that the defaults depend on."""

    cuda: bool
    cpus: int
    local_processes: int
    shm_shortage: str | None  # why workers would run out of /dev/shm, or None
    distributed: bool  # a torch.distributed process group is initialised

    @classmethod
    def here(cls) -> Machine:
        return cls(
            cuda=torch.cuda.is_available(),
            cpus=available_cpus(),
            local_processes=local_processes(),
            shm_shortage=small_shared_memory(),
            distributed=dist.is_available() and dist.is_initialized(),
        )


@dataclass
class Defaults:
    """What FastLoader passes to DataLoader, and why it chose what the caller left unset
    (``choices``: argument -> reason; ``warning``: a choice to warn about)."""

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    distributed_sampler: bool
    choices: dict[str, str] = field(default_factory=dict)
    warning: str | None = None


def choose_fetch(
    *, iterable: bool, tensor_dataset: bool, collate_fn_given: bool, collates: bool, seeded: bool
) -> tuple[bool, bool]:
    """``(in_memory, keyed)``: whether FastLoader fetches in-memory tensors a batch at a
    time (its own collate then), and whether it seeds each sample's loading (``seed=``).
    Either puts a view over the dataset; otherwise DataLoader gets the user's dataset,
    and workers see it as it is."""
    in_memory = not iterable and tensor_dataset and collates and not collate_fn_given
    return in_memory, seeded and not iterable and not in_memory


def choose_defaults(
    *,
    num_workers: int | str,
    machine: Machine,
    in_memory: bool = False,
    iterable: bool = False,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: int | None = None,
    has_sampler: bool = False,
    tuned: tuple[int, int | None, str] | None = None,
) -> Defaults:
    """The defaults FastLoader fills in; an argument the caller gave always wins.

    Args:
        num_workers: The caller's: an int, ``'auto'`` or ``'tune'`` (with ``tuned``, the
            worker count and prefetch factor the measurement chose, and its summary).
        in_memory: The dataset is in-memory tensors, fetched a batch at a time.
        iterable: The dataset is an ``IterableDataset``.
        has_sampler: The caller gave a ``sampler`` or ``batch_sampler``.
    """
    choices: dict[str, str] = {}
    if in_memory:
        choices["fetch"] = "one indexing operation per batch (in-memory tensors)"
    warning = None
    chosen = isinstance(num_workers, str)
    if num_workers == TUNE and tuned is not None:
        workers, prefetch_factor, choices["num_workers"] = tuned
        if workers:
            choices["prefetch_factor"] = "tuned with num_workers"
    elif not chosen:
        workers = int(num_workers)
        if workers > 0 and machine.shm_shortage is not None:  # the caller chose: only say so
            warning = f"FastLoader with {workers} workers: {machine.shm_shortage}"
    elif in_memory:
        workers = 0
        choices["num_workers"] = "in-memory tensors are indexed a batch at a time"
    elif iterable:
        # Each worker iterates its own copy: unless the dataset splits itself with
        # get_worker_info(), every sample would come once per worker.
        workers = 0
        choices["num_workers"] = (
            "an IterableDataset is copied into every worker; pass num_workers=N if it "
            "shards itself by get_worker_info()"
        )
    elif machine.shm_shortage is not None:
        workers = 0
        choices["num_workers"] = machine.shm_shortage
        warning = f"FastLoader uses no workers: {machine.shm_shortage}"
    else:
        workers = auto_num_workers(cpus=machine.cpus, local_world_size=machine.local_processes)
        choices["num_workers"] = (
            f"{machine.cpus} CPUs / {machine.local_processes} local process(es), "
            f"at most {MAX_AUTO_WORKERS}"
        )
    if pin_memory is None:
        pin_memory = machine.cuda
        choices["pin_memory"] = "CUDA available" if pin_memory else "no CUDA"
    if workers > 0:
        if persistent_workers is None:
            persistent_workers = True
            choices["persistent_workers"] = "workers kept across epochs"
        if prefetch_factor is None:
            prefetch_factor = max(2, math.ceil(MIN_BATCHES_IN_FLIGHT / workers))
            choices["prefetch_factor"] = f"{prefetch_factor * workers} batches in flight"
    distributed_sampler = machine.distributed and not has_sampler and not iterable
    return Defaults(
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=bool(persistent_workers),
        prefetch_factor=prefetch_factor,
        distributed_sampler=distributed_sampler,
        choices=choices,
        warning=warning,
    )


def describe_choices(loader: DataLoader[Any]) -> str:
    """What the loader chose and why, ``name=value (reason)`` for each of its ``choices``."""
    values = {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "prefetch_factor": loader.prefetch_factor,
        "sampler": type(loader.sampler).__name__,
        "fetch": "batched",
        "super_batches": getattr(loader, "super_batches", False),
    }
    choices: dict[str, str] = getattr(loader, "choices", {})
    return ", ".join(f"{name}={values[name]} ({why})" for name, why in choices.items())
