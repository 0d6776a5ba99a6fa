"""Output buffers that are reused once nobody holds them: no fresh pages per batch.

A 64-image float batch of 224 px is 38.5 MB. Allocated anew for every batch, the CPU
pays for it three times: the allocator maps fresh pages, the first write faults each
one in (zeroed by the kernel), and freeing unmaps them again. Writing into a buffer
that already exists costs only the write.
"""

from __future__ import annotations

import torch

from fastload._checks import check_int

__all__ = ["BufferPool"]


def _storage_users(tensor: torch.Tensor) -> int | None:
    """How many tensors share ``tensor``'s memory, or None when this torch cannot tell."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)  # torch >= 2.1
    if use_count is None:
        return None
    return int(use_count(tensor.untyped_storage()._cdata))


class BufferPool:
    """Hands out tensors of a requested shape, reusing one only when no tensor, view or
    NumPy array made from it is still alive anywhere; otherwise allocates a new one.

    What :meth:`take` returns is a view of a pooled buffer: while the caller (or a view
    of it, or a model's saved activations) keeps it, its memory is never written again.
    Without a way to tell (a torch older than 2.1), every call allocates.

    Args:
        size: At most this many buffers are kept; more in use at once are allocated and
            freed as usual.

    Example:
        >>> pool = BufferPool()
        >>> first = pool.take((2, 3), torch.float32)
        >>> pool.take((2, 3), torch.float32).data_ptr() == first.data_ptr()  # still held
        False
        >>> address = first.data_ptr(); del first
        >>> pool.take((2, 3), torch.float32).data_ptr() == address
        True
    """

    def __init__(self, size: int = 4) -> None:
        check_int(size, "size", low=1)
        self.size = size
        self._buffers: list[tuple[torch.Tensor, int]] = []  # (buffer, users when idle)

    def take(
        self,
        shape: tuple[int, ...] | torch.Size,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        memory_format: torch.memory_format = torch.contiguous_format,
    ) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, ``dtype`` on ``device`` in ``memory_format``."""
        shape, device = torch.Size(shape), torch.device(device)
        for buffer, idle_users in self._buffers:
            if (
                buffer.shape == shape
                and buffer.dtype == dtype
                and buffer.device == device
                and buffer.is_contiguous(memory_format=memory_format)
                and _storage_users(buffer) == idle_users
            ):
                return buffer.detach()  # a new tensor on the same memory: counted as a user
        buffer = torch.empty(shape, dtype=dtype, device=device, memory_format=memory_format)
        users = _storage_users(buffer)
        if users is not None:
            if len(self._buffers) == self.size:
                self._buffers.pop(0)  # the oldest: the shapes in use have moved on
            self._buffers.append((buffer, users))
        return buffer.detach()
