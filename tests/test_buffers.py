from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastload.buffers import BufferPool


def test_a_released_buffer_is_reused_and_a_held_one_never():
    pool = BufferPool()
    first = pool.take((4, 3), torch.float32)
    address = first.data_ptr()
    second = pool.take((4, 3), torch.float32)
    assert second.data_ptr() != address  # `first` is still held
    del first
    assert pool.take((4, 3), torch.float32).data_ptr() == address
    assert second.shape == (4, 3) and second.dtype == torch.float32


@pytest.mark.parametrize(
    "keep",
    [
        lambda t: t[1:],  # a view
        lambda t: t.view(-1),
        lambda t: t.numpy(),
        lambda t: [t],
        lambda t: t.t(),
    ],
    ids=["slice", "view", "numpy", "in a list", "transpose"],
)
def test_anything_made_from_a_buffer_keeps_it_from_reuse(keep):
    pool = BufferPool()
    taken = pool.take((4, 3), torch.float32)
    address = taken.data_ptr()
    kept = keep(taken)
    del taken
    assert pool.take((4, 3), torch.float32).data_ptr() != address
    del kept
    assert pool.take((4, 3), torch.float32).data_ptr() == address


def test_shape_dtype_and_memory_format_must_match():
    pool = BufferPool()
    address = pool.take((2, 3, 4, 5), torch.float32).data_ptr()
    assert pool.take((2, 3, 4, 6), torch.float32).data_ptr() != address
    assert pool.take((2, 3, 4, 5), torch.float64).data_ptr() != address
    last = pool.take((2, 3, 4, 5), torch.float32, memory_format=torch.channels_last)
    assert last.is_contiguous(memory_format=torch.channels_last)
    assert last.data_ptr() != address


def test_at_most_size_buffers_are_kept_the_oldest_goes():
    pool = BufferPool(size=2)
    pool.take((8,), torch.uint8)  # released at once
    held = [pool.take((n,), torch.uint8) for n in (1, 2)]  # two new shapes push (8,) out
    assert [tuple(buffer.shape) for buffer, _ in pool._buffers] == [(1,), (2,)]
    assert [t.shape for t in held] == [(1,), (2,)]


@pytest.mark.parametrize("size", [0, -1, 1.5, True, None])
def test_a_bad_size_is_refused(size):
    with pytest.raises(ValueError, match=r"size must be an int >= 1, got"):
        BufferPool(size=size)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=1, max_size=40))
def test_held_buffers_keep_their_contents_whatever_the_order(steps):
    """Take a buffer per step, fill it with the step number, and release some of the held
    ones as the steps say: every buffer still held keeps the value written into it."""
    pool = BufferPool(size=3)
    held: dict[int, torch.Tensor] = {}
    for step, (release, which) in enumerate(steps):
        if release and held:
            held.pop(sorted(held)[which % len(held)])
        held[step] = pool.take((5,), torch.int64).fill_(step)
        assert all(torch.equal(t, torch.full((5,), s)) for s, t in held.items())
