"""``min_size`` is checked where it is given, by every dataset and the decoder: a size of 0
or below would decode every JPEG at 1/8 of its size, silently."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastload import ImageFolder, LMDBDataset, make_image_folder, write_lmdb
from fastload.decode.opencv import check_min_size, decode_image, read_image
from fastload.shards import ShardedDataset, write_shards

BAD = [0, -1, 1.5, True, (0, 10), (10,), (10, 10, 10), (10, 2.5), "224", [224, -3]]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("min-size")
    folder = make_image_folder(root / "images", num_classes=2, images_per_class=2, size=(64, 48))
    write_lmdb(folder, root / "set.lmdb", progress=False)
    write_shards(folder, root / "shards")
    return {"folder": folder, "lmdb": root / "set.lmdb", "shards": root / "shards"}


def _datasets(stores: dict[str, Path]) -> dict[str, object]:
    return {
        "ImageFolder": lambda size: ImageFolder(stores["folder"], min_size=size),
        "LMDBDataset": lambda size: LMDBDataset(stores["lmdb"], min_size=size),
        "ShardedDataset": lambda size: ShardedDataset(stores["shards"], min_size=size),
        "read_image": lambda size: read_image(next(stores["folder"].rglob("*.jpg")), min_size=size),
    }


@pytest.mark.parametrize("size", BAD, ids=repr)
@pytest.mark.parametrize("entry", ["ImageFolder", "LMDBDataset", "ShardedDataset", "read_image"])
def test_every_entry_point_refuses_a_min_size_that_is_not_a_size(stores, entry, size):
    with pytest.raises(ValueError, match=r"min_size must be None, an int >= 1 or an \(h, w\) pair"):
        _datasets(stores)[entry](size)


@pytest.mark.parametrize("entry", ["ImageFolder", "LMDBDataset", "ShardedDataset"])
def test_a_good_min_size_still_reduces_the_decode(stores, entry):
    dataset = _datasets(stores)[entry]((16, np.int64(12)))
    assert dataset.min_size == (16, 12)
    image, _ = dataset[0]
    assert image.shape == (24, 32, 3)  # 48x64 decoded at 1/2: still at least 16x12


@given(st.one_of(st.integers(max_value=0), st.floats(allow_nan=True), st.booleans(),
                 st.tuples(st.integers(max_value=0), st.integers(min_value=1))))  # fmt: skip
def test_decode_image_refuses_any_min_size_that_is_not_a_size(size):
    with pytest.raises(ValueError, match="min_size must be"):
        decode_image(b"\xff\xd8 not read", min_size=size)


@given(st.one_of(st.integers(min_value=1),
                 st.tuples(st.integers(min_value=1), st.integers(min_value=1))))  # fmt: skip
def test_any_positive_size_or_pair_is_accepted_as_given(size):
    assert check_min_size(size) == size
