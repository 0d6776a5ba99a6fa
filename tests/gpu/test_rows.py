"""The policies' step: each sample through the operation it drew, the samples of one
operation together; on a CPU in runs of at most CPU_RUN_BYTES, which give each sample
what it gets alone."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from common_utils import cpu_and_cuda
from fastload.gpu.rows import CPU_RUN_BYTES, apply_each_drawn, in_runs


def shifted(images, index, rows):
    """A per-sample operation: each sample plus its op's index and its row number."""
    return images + (index + 10 * rows).view(-1, 1, 1, 1).to(images.dtype)


@pytest.mark.parametrize("device", cpu_and_cuda())
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), height=st.integers(1, 400), data=st.data())
def test_each_sample_gets_its_own_ops_result(device, n, height, data):
    drawn = torch.tensor(data.draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)))
    images = torch.rand(n, 3, height, 256, device=device)  # 1 to 341 samples a run
    calls = []

    def transform(chosen, index, rows):
        calls.append((index, rows.tolist()))
        return shifted(chosen, index, rows.to(device))

    got = apply_each_drawn(images, drawn.to(device), transform)
    rows = torch.arange(n, device=device)
    want = torch.where((drawn >= 0).to(device).view(-1, 1, 1, 1),
                       shifted(images, drawn.to(device), rows), images)  # fmt: skip
    assert torch.equal(got, want)
    # every sample that drew an op is transformed once, with its op, in order
    assert sorted(row for _, part in calls for row in part) == [
        i for i in range(n) if drawn[i] >= 0
    ]
    assert all(drawn[row] == index for index, part in calls for row in part)
    per_run = max(1, CPU_RUN_BYTES // (4 * images[0].numel()))
    if device == "cpu":
        assert all(len(part) <= per_run for _, part in calls)
        assert len(calls) == sum(-(-int((drawn == i).sum()) // per_run) for i in range(4))
    else:
        assert len(calls) == len(set(drawn.tolist()) - {-1})


def test_nothing_drawn_leaves_the_batch_itself_and_an_op_never_writes_into_it():
    images = torch.rand(3, 3, 8, 8)
    before = images.clone()
    assert apply_each_drawn(images, torch.full((3,), -1), shifted) is images
    out = apply_each_drawn(images, torch.tensor([0, -1, 2]), shifted)
    assert torch.equal(images, before) and not torch.equal(out, before)


def test_an_owned_batch_is_written_into_not_copied():
    images = torch.zeros(4, 1, 2, 2)
    out = apply_each_drawn(images, torch.tensor([1, -1, 1, -1]), shifted, owned=True)
    assert out is images
    assert images[:, 0, 0, 0].tolist() == [1.0, 0.0, 21.0, 0.0]


@pytest.mark.parametrize("device", cpu_and_cuda())
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), height=st.integers(1, 400), channels_last=st.booleans())
def test_runs_of_a_batch_give_the_whole_batchs_result_in_its_layout(
    device, n, height, channels_last
):
    images = torch.rand(n, 3, height, 256, device=device)  # 1 to 341 samples a run
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    factors = torch.rand(n, device=device)
    seen = []

    def scaled(chosen, rows):
        seen.append(range(n)[rows])
        return (chosen * factors[rows].view(-1, 1, 1, 1)).to(torch.float64)

    got = in_runs(images, scaled)
    assert torch.equal(got, (images * factors.view(-1, 1, 1, 1)).to(torch.float64))
    assert got.is_contiguous(memory_format=torch.channels_last) == (
        channels_last and not images.is_contiguous()
    )
    per_run = max(1, CPU_RUN_BYTES // (4 * images[0].numel())) if device == "cpu" else n
    assert [list(r) for r in seen] == [
        list(range(start, min(start + per_run, n))) for start in range(0, n, per_run)
    ]
