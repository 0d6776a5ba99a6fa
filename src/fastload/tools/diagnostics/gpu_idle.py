"""How long the GPU waits between training steps, read from CUDA events, with no
synchronisation inside the loop.

An event recorded on the training stream when a step starts (after its batch is in
hand) and one when it ends: the GPU reaches the start event only once the host has
enqueued it, so the time between one step's end and the next one's start, as the GPU
saw it, is the time it had nothing to do. The host never waits for the GPU until
:meth:`StepEvents.idle_fraction` is read, after the loop.
"""

from __future__ import annotations

import torch

from fastload.typed_torch import new_event

__all__ = ["StepEvents"]


class StepEvents:
    """Events around each training step on ``device``'s current stream.

    Example (on a CUDA machine)::

        events = StepEvents(device)
        for images, labels in batches:
            events.started()
            train_step(images, labels)
            events.ended()
        print(events.idle_fraction())   # 0.02: the GPU idled 2 % of the loop
        print(events.step_seconds()[0])  # (0.41, 0.43): the first batch came 0.41 s in

    Make it where the loop begins: :meth:`step_seconds` counts from then.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"StepEvents needs a CUDA device, got {self.device}")
        self._starts: list[torch.cuda.Event] = []
        self._ends: list[torch.cuda.Event] = []
        self._made: list[torch.cuda.Event] = []
        self._record(self._made)

    def _record(self, events: list[torch.cuda.Event]) -> None:
        # torch leaves torch.cuda.Event unannotated
        event = new_event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        events.append(event)

    def started(self) -> None:
        """A step begins: its batch is in hand (any wait for the batch is before this)."""
        if len(self._starts) != len(self._ends):
            raise RuntimeError("StepEvents: started() twice without ended()")
        self._record(self._starts)

    def ended(self) -> None:
        """The step's work is enqueued."""
        if len(self._ends) != len(self._starts) - 1:
            raise RuntimeError("StepEvents: ended() without started()")
        self._record(self._ends)

    @property
    def steps(self) -> int:
        return len(self._ends)

    def idle_fraction(self) -> float:
        """The share of the loop, first start to last end, in which the GPU waited
        between steps (waits once, for the last event)."""
        if self.steps < 2:
            raise ValueError(f"need at least 2 steps to see a gap between them, got {self.steps}")
        self._ends[-1].synchronize()
        total = self._starts[0].elapsed_time(self._ends[-1])
        gaps = sum(
            end.elapsed_time(start)
            for end, start in zip(self._ends[:-1], self._starts[1:], strict=True)
        )
        return max(0.0, gaps) / total if total > 0 else 0.0

    def step_seconds(self) -> list[tuple[float, float]]:
        """Each step's start and end as the GPU reached them, in seconds since these events
        were made (waits once, for the last event): the first start is how long the loop
        waited for its first batch."""
        if self.steps == 0:
            return []
        self._ends[-1].synchronize()
        origin = self._made[0]
        return [
            (origin.elapsed_time(start) / 1000, origin.elapsed_time(end) / 1000)
            for start, end in zip(self._starts, self._ends, strict=True)
        ]
