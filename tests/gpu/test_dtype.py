"""Results back to the images' dtype: on a CPU float to uint8 through NumPy gives what
torch's cast gives, in the same memory layout."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload.gpu.functional.dtype import back_to, restore


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    channels_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_uint8_from_floats_in_range_is_torchs_cast(dtype, shape, channels_last, seed):
    generator = torch.Generator().manual_seed(seed)
    values = (torch.rand(shape, generator=generator, dtype=torch.float64) * 255.999).to(dtype)
    if channels_last and len(shape) == 4:
        values = values.contiguous(memory_format=torch.channels_last)
    got = back_to(values, torch.uint8)
    assert got.dtype == torch.uint8 and torch.equal(got, values.to(torch.uint8))
    assert got.stride() == values.to(torch.uint8).stride()


def test_other_dtypes_and_tensors_that_need_grad_take_torchs_cast():
    values = torch.tensor([0.5, 254.9], requires_grad=True)
    assert torch.equal(back_to(values, torch.uint8), torch.tensor([0, 254], dtype=torch.uint8))
    assert back_to(torch.tensor([1.5]), torch.float16).dtype == torch.float16


@pytest.mark.parametrize("high", [255.4, 255.6, 300.0])
def test_restore_rounds_and_clamps_to_uint8(high):
    values = torch.tensor([-3.0, 0.4, 0.6, 127.5, 128.5, high])
    want = [0, 0, 1, 128, 128, 255]  # round half to even, as torch rounds
    assert restore(values, torch.uint8).tolist() == want
