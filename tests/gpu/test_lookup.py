"""Per-pixel operations on uint8 CPU images go through a lookup table per sample: the
result is the plain arithmetic's, bit for bit, for any sizes, layouts and parameters."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload.gpu.functional import adjust_brightness, adjust_contrast, lookup, solarize
from fastload.gpu.functional.color import _blend_with_value, grayscale
from fastload.gpu.functional.lookup import per_pixel, through_tables
from fastload.integrations.timm.policies import solarize_add


def arithmetic(operation):
    """The operation as written, without the tables."""
    return operation.__wrapped__


def contrast_by_arithmetic(images, factor):
    mean = grayscale(images).mean(dim=(1, 2, 3), keepdim=True)
    return arithmetic(_blend_with_value)(images, mean, factor)


# (the operation, the same by arithmetic alone, a per-sample parameter from a uniform draw)
CASES = {
    "brightness": (adjust_brightness, arithmetic(adjust_brightness), lambda u: 2.5 * u),
    "contrast": (adjust_contrast, contrast_by_arithmetic, lambda u: 3 * u - 0.5),
    "solarize": (solarize, arithmetic(solarize), lambda u: 300 * u - 20),
    "solarize_add": (solarize_add, arithmetic(solarize_add), lambda u: (140 * u).floor()),
}


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(sorted(CASES)),
    n=st.integers(1, 5),
    height=st.integers(12, 40),  # 3 x 12 x 30 values a sample: at least MIN_ELEMENTS
    width=st.integers(30, 60),
    channels_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tables_give_the_arithmetics_result(case, n, height, width, channels_last, seed):
    operation, by_arithmetic, parameter = CASES[case]
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, height, width), dtype=torch.uint8, generator=generator)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    argument = parameter(torch.rand(n, generator=generator))
    tables = mock.patch.object(lookup, "through_tables", wraps=lookup.through_tables)
    with tables as looked_up:
        got = operation(images, argument)
    want = by_arithmetic(images, argument)
    assert looked_up.call_count == 1 and torch.equal(got, want)
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last


def test_every_value_of_every_sample_is_looked_up_in_its_own_table():
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)
    images = torch.cat([values, values.flip(-1), 255 - values]).expand(3, 3, 16, 16)
    tables = torch.stack([torch.arange(256).roll(shift) for shift in (1, 7, 100)])

    def point(v):  # each sample its own table: a roll by its shift
        return tables.to(torch.uint8).view(3, 1, 1, 256).gather(3, v.long()).to(torch.uint8)

    got = through_tables(images, point)
    want = torch.stack([tables[i][images[i].long()] for i in range(3)]).to(torch.uint8)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "images",
    [
        torch.zeros(0, 3, 20, 20, dtype=torch.uint8),  # no sample
        torch.zeros(2, 3, 16, 16, dtype=torch.uint8),  # under MIN_ELEMENTS a sample
        torch.zeros(2, 3, 20, 20),  # floats
        torch.zeros(3, 20, 20, dtype=torch.uint8),  # one image, not a batch
    ],
    ids=["empty", "small", "float", "3-d"],
)
def test_what_a_table_does_not_pay_for_runs_as_written(images):
    calls = []

    @per_pixel
    def double(x, factor):
        calls.append(x.shape)
        return x * factor

    assert torch.equal(double(images, 2), images * 2)
    assert calls == [images.shape]


def test_the_sizes_tested_fall_on_both_sides_of_the_table_threshold():
    assert 3 * 16 * 16 < lookup.MIN_ELEMENTS <= 3 * 12 * 30
