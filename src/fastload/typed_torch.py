"""torch's calls that its annotations leave untyped, under typed names: a module that
calls one through here is type-checked at the call, and ``mypy --strict`` needs no
``# type: ignore`` there. Each name is torch's own object; only its type is said here,
as torch documents it.

Example:
    >>> import torch
    >>> length(torch.utils.data.TensorDataset(torch.zeros(3)))
    3
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any, cast

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory

__all__ = [
    "backward",
    "exception_wrapper",
    "length",
    "new_event",
    "new_stream",
    "pin_memory",
    "reraise",
    "share_memory",
]

#: ``torch.cuda.Stream(device, priority=...)``.
new_stream: Callable[..., torch.cuda.Stream] = torch.cuda.Stream
#: ``torch.cuda.Event(enable_timing=...)``.
new_event: Callable[..., torch.cuda.Event] = torch.cuda.Event
#: DataLoader's pin of a batch (and the device to pin for): each tensor in it copied
#: into pinned memory.
pin_memory: Callable[..., Any] = _pin_memory
#: DataLoader's wrap of an exception raised in a worker: ``(type, value, traceback)``, and
#: ``where`` it was raised; it crosses processes as its message.
exception_wrapper: Callable[..., ExceptionWrapper] = ExceptionWrapper
#: Raises the exception a wrapper carries, rebuilt from its message.
reraise: Callable[[ExceptionWrapper], None] = ExceptionWrapper.reraise
#: ``tensor.share_memory_()``: the tensor, moved into shared memory.
share_memory: Callable[[torch.Tensor], torch.Tensor] = torch.Tensor.share_memory_
#: ``loss.backward()``.
backward: Callable[[torch.Tensor], None] = torch.Tensor.backward


def length(container: object) -> int:
    """``len(container)`` for a Dataset or DataLoader, whose annotations leave out the
    ``__len__`` a map-style dataset has (a container without one raises TypeError)."""
    return len(cast(Sized, container))
