"""EXIF orientation: an image as stored, shown as its tag says, by a copy (orient) and by
an address and two steps (shown_steps), which must read the same pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastload.decode.orientation import orient, shown_steps


def read_shown(flat: torch.Tensor, start: int, height: int, width: int, steps) -> torch.Tensor:
    """The (3, height, width) image at ``start`` of ``flat`` with (channel, y, x) steps."""
    step_c, step_y, step_x = steps
    c, y, x = torch.meshgrid(
        torch.arange(3), torch.arange(height), torch.arange(width), indexing="ij"
    )
    return flat[start + c * step_c + y * step_y + x * step_x]


@given(
    orientation=st.integers(1, 8),
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    hwc=st.booleans(),
)
def test_the_steps_read_the_pixels_orient_shows(orientation, height, width, hwc):
    generator = torch.Generator().manual_seed(100 * height + width)
    chw = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=generator)
    stored = chw.permute(1, 2, 0).contiguous() if hwc else chw  # the decoder's layout
    step_c, step_y, step_x = (1, 3 * width, 3) if hwc else (height * width, width, 1)
    offset, shown_h, shown_w, shown_y, shown_x = (
        int(value[0])
        for value in shown_steps(
            np.array([orientation]), np.array([height]), np.array([width]),
            np.array([step_y]), np.array([step_x]),
        )
    )  # fmt: skip
    want = orient(chw, orientation)
    assert (shown_h, shown_w) == tuple(want.shape[1:])
    got = read_shown(stored.reshape(-1), offset, shown_h, shown_w, (step_c, shown_y, shown_x))
    assert torch.equal(got, want)


@pytest.mark.parametrize("tag", [0, 9, -1, 255])
def test_a_value_that_is_no_orientation_shows_the_image_as_stored(tag):
    offset, height, width, step_y, step_x = shown_steps(
        np.array([tag]), np.array([4]), np.array([5]), np.array([5]), np.array([1])
    )
    assert (offset[0], height[0], width[0], step_y[0], step_x[0]) == (0, 4, 5, 5, 1)


def test_a_batch_is_worked_out_at_once():
    orientations = np.array([1, 6, 3, 8])
    heights, widths = np.array([2, 2, 2, 2]), np.array([3, 3, 3, 3])
    offset, height, width, step_y, step_x = shown_steps(
        orientations, heights, widths, widths.copy(), np.ones(4, np.int64)
    )
    assert offset.tolist() == [0, 3, 5, 2] and step_y.tolist() == [3, 1, -3, -1]
    assert step_x.tolist() == [1, -3, -1, 3]
    assert height.tolist() == [2, 3, 2, 3] and width.tolist() == [3, 2, 3, 2]
