"""What DataPrefetcher asks of a decoder, as a Protocol: a decoder whose work splits into
the host's part (headers, boxes: planned on the producer's reading thread) and the
device's (the decode and its kernels: run on its device thread), so that the thread
taking batches from the loader never waits on a decode."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor

__all__ = ["PlansDecode"]


@runtime_checkable
class PlansDecode(Protocol):
    """``run(plan(encoded))`` is what ``decoder(encoded)`` returns."""

    def plan(self, encoded: Any) -> Any:
        """The host's part for the batch ``encoded``: no device work, no wait on one."""

    def run(self, plan: Any) -> Tensor:
        """The device's part: the decoded (and finished) batch."""
