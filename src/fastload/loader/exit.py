"""Persistent workers ended at the start of the interpreter's exit, on every torch.

With persistent workers and pinned memory, torch before 2.14 registers, per worker, an
exit handler that joins the worker with a 5-s timeout while nothing has told it to stop:
a script with 16 workers takes 80 s to end after its last line (pytorch/pytorch#81794).
torch 2.14 shuts its live iterators down at exit first; this does the same on older
versions (and is a no-op where torch did it already: a shut-down iterator stays so).
"""

from __future__ import annotations

import atexit
import weakref
from typing import TypeVar

from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

__all__ = ["end_workers_at_exit"]

_LIVE: weakref.WeakSet[_MultiProcessingDataLoaderIter] = weakref.WeakSet()
Iterator = TypeVar("Iterator")


def end_workers_at_exit(iterator: Iterator) -> Iterator:
    """``iterator``, whose persistent workers are told to stop and joined before torch's
    own exit handlers for them run (exit handlers run last-registered first: the handler
    is registered again after each new iterator's)."""
    if isinstance(iterator, _MultiProcessingDataLoaderIter) and iterator._persistent_workers:
        _LIVE.add(iterator)
        atexit.unregister(_end_live_workers)
        atexit.register(_end_live_workers)
    return iterator


def _end_live_workers() -> None:
    for iterator in list(_LIVE):
        iterator._shutdown_workers()
