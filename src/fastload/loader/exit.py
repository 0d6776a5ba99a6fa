"""Persistent workers ended at the start of the interpreter's exit, on every torch.

With persistent workers and pinned memory, torch before 2.14 registers, per worker, an
exit handler that joins the worker with a 5-s timeout while nothing has told it to stop:
a script with 16 workers takes 80 s to end after its last line (pytorch/pytorch#81794).
torch 2.14 registers one handler that shuts its live iterators down first; this does the
same on older versions, and nothing where torch does it or registers no handler (no
pinned memory): an exit handler of the user's then runs before any of ours.

Exit handlers run last-registered first, so one registered after a user's runs before it.
A user's handler that makes a last pass over the loader must still get it:
:func:`shut_down` tells FastLoader that the persistent iterator it would reuse is over,
and the loader starts a new one.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Any, TypeVar

from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

__all__ = ["end_workers_at_exit", "shut_down"]

_LIVE: weakref.WeakSet[_MultiProcessingDataLoaderIter] = weakref.WeakSet()
Iterator = TypeVar("Iterator")
# torch 2.14 and later end their persistent iterators at exit themselves, before the
# per-worker joins older versions register
_TORCH_ENDS_THEM = hasattr(_MultiProcessingDataLoaderIter, "_clean_up_persistent_workers_atexit")


def end_workers_at_exit(iterator: Iterator) -> Iterator:
    """``iterator``, whose persistent workers are told to stop and joined before torch's
    own exit handlers for them run, where torch registers per-worker ones (before 2.14,
    with pinned memory): the handler is registered again after each such iterator's."""
    if (
        not _TORCH_ENDS_THEM
        and isinstance(iterator, _MultiProcessingDataLoaderIter)
        and iterator._persistent_workers
        and iterator._pin_memory
    ):
        _LIVE.add(iterator)
        atexit.unregister(_end_live_workers)
        atexit.register(_end_live_workers)
    return iterator


def shut_down(iterator: Any) -> bool:
    """Whether ``iterator`` (a loader's persistent one) was shut down, by an exit handler
    or by a failure, so that it cannot be reset for another pass."""
    return bool(getattr(iterator, "_shutdown", False))


def _end_live_workers() -> None:
    for iterator in list(_LIVE):
        iterator._shutdown_workers()
