"""blend_where picks each sample from the changed or the original batch: on a CPU by
copying whole images, with torch.where's result."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from common_utils import cpu_and_cuda
from fastload.gpu.base import COPY_ELEMENTS, blend_where


@pytest.mark.parametrize("device", cpu_and_cuda())
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 6),
    side=st.sampled_from([5, 64]),  # below COPY_ELEMENTS, and above: copied whole on a CPU
    dtypes=st.sampled_from(
        [(torch.uint8, torch.uint8), (torch.float32, torch.float32), (torch.uint8, torch.float32)]
    ),
    expanded=st.booleans(),
    data=st.data(),
)
def test_each_sample_from_the_batch_it_takes(device, n, side, dtypes, expanded, data):
    apply = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    original = (torch.rand(n, 3, side, 70) * 255).to(dtypes[0]).to(device)
    changed = (torch.rand(n, 1 if expanded else 3, side, 70) * 255).to(dtypes[1]).to(device)
    changed = changed.expand(n, 3, side, 70)
    got = blend_where(apply.to(device), changed, original)
    want = torch.where(apply.to(device).view(-1, 1, 1, 1), changed, original)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_a_changed_batch_of_another_shape_is_broadcast_as_where_does():
    original, changed = torch.zeros(2, 3, 4, 4), torch.ones(1, 3, 4, 4)
    got = blend_where(torch.tensor([True, False]), changed, original)
    assert got[:, 0, 0, 0].tolist() == [1.0, 0.0]


def test_the_sizes_tested_fall_on_both_sides_of_the_copy_threshold():
    assert 3 * 5 * 70 < COPY_ELEMENTS <= 3 * 64 * 70
