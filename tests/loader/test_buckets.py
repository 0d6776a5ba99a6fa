from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload.loader import BucketBatchSampler


def aspect_bucket(sampler: BucketBatchSampler, index: int) -> int:
    return int(sampler.bucket_of[index])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 900)), min_size=1, max_size=80),
    batch_size=st.integers(1, 9),
    drop_last=st.booleans(),
    seed=st.integers(0, 100),
)
def test_every_index_once_each_batch_one_bucket_and_len_exact(sizes, batch_size, drop_last, seed):
    sampler = BucketBatchSampler(sizes, batch_size, drop_last=drop_last, seed=seed)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(0 < len(batch) <= batch_size for batch in batches)
    assert all(len({aspect_bucket(sampler, i) for i in batch}) == 1 for batch in batches)
    seen = [index for batch in batches for index in batch]
    assert len(seen) == len(set(seen))  # never a sample twice
    if not drop_last:
        assert sorted(seen) == list(range(len(sizes)))
    else:
        assert all(len(batch) == batch_size for batch in batches)


def test_similar_shapes_share_batches_and_padding_stays_small():
    sizes = [(375, 500), (500, 375), (480, 640), (640, 480)] * 8
    sampler = BucketBatchSampler(sizes, 4, seed=0)
    for batch in sampler:
        landscape = {sizes[i][1] > sizes[i][0] for i in batch}
        assert len(landscape) == 1  # never a portrait beside a landscape


def test_order_is_seeded_and_moves_with_the_epoch():
    sizes = [(10, 10 + i % 7) for i in range(50)]
    first = list(BucketBatchSampler(sizes, 5, seed=3))
    assert first == list(BucketBatchSampler(sizes, 5, seed=3))
    moved = BucketBatchSampler(sizes, 5, seed=3)
    moved.set_epoch(1)
    assert list(moved) != first
    assert list(BucketBatchSampler(sizes, 5, shuffle=False)) == list(
        BucketBatchSampler(sizes, 5, shuffle=False, seed=9)
    )


@pytest.mark.parametrize(
    ("sizes", "kwargs", "message"),
    [
        ([(1, 1)], {"batch_size": 0}, r"batch_size must be an int >= 1, got 0"),
        ([(1, 1)], {"batch_size": 2, "buckets": 0}, r"buckets must be an int >= 1"),
        ([(4, 4), (0, 3)], {"batch_size": 2}, r"sample 1 is \(0, 3\)"),
    ],
)
def test_bad_arguments_name_themselves(sizes, kwargs, message):
    with pytest.raises(ValueError, match=message):
        BucketBatchSampler(sizes, **kwargs)


def test_it_drives_a_dataloader_as_batch_sampler():
    from torch.utils.data import DataLoader

    sizes = [(8, 8), (8, 16)] * 6
    loader = DataLoader(list(range(12)), batch_sampler=BucketBatchSampler(sizes, 3))
    assert sorted(int(i) for batch in loader for i in batch) == list(range(12))
    assert len(loader) == 4 and torch.is_tensor(next(iter(loader)))


@pytest.mark.parametrize("sizes", [[(10, 20, 3), (20, 10, 3)], [10, 20, 30, 40], [[[1, 2]]]])
def test_sizes_that_are_not_pairs_are_refused_not_reshaped(sizes):
    with pytest.raises(ValueError, match=r"one \(height, width\) pair per sample, got an array"):
        BucketBatchSampler(sizes, 2)


def test_no_samples_make_no_batches():
    assert list(BucketBatchSampler([], 2)) == [] and len(BucketBatchSampler([], 2)) == 0
