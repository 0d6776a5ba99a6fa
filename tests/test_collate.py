from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from fastload.collate import encoded_collate, uint8_collate


def image(height=48, width=64, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_uint8_collate_stacks_hwc_arrays_and_chw_tensors_to_nchw():
    arrays = [image(seed=i) for i in range(3)]
    images, labels, names = uint8_collate([(a, i, f"n{i}") for i, a in enumerate(arrays)])
    assert images.shape == (3, 3, 48, 64) and images.dtype == torch.uint8 and images.is_contiguous()
    assert all(
        torch.equal(images[i], torch.from_numpy(arrays[i]).permute(2, 0, 1)) for i in range(3)
    )
    _, want_labels, want_names = default_collate([(0, i, f"n{i}") for i in range(3)])
    assert torch.equal(labels, want_labels) and names == want_names == ("n0", "n1", "n2")
    tensors = [torch.from_numpy(a).permute(2, 0, 1) for a in arrays]
    assert torch.equal(uint8_collate(tensors), images)


def test_uint8_collate_names_mismatched_shapes():
    with pytest.raises(
        ValueError, match=r"images in a batch differ in shape \[\(3, 4, 4\), \(3, 5, 5\)\]"
    ):
        uint8_collate([image(4, 4), image(5, 5)])
    with pytest.raises(ValueError, match="cannot collate an empty batch"):
        uint8_collate([])


def test_encoded_collate_keeps_byte_tensors_of_any_length_as_a_list():
    encoded = [torch.arange(n, dtype=torch.uint8) for n in (3, 5, 4)]
    images, labels = encoded_collate([(e, i) for i, e in enumerate(encoded)])
    assert images == encoded and labels.tolist() == [0, 1, 2]
    assert encoded_collate(encoded) == encoded
    with pytest.raises(ValueError, match="cannot collate an empty batch"):
        encoded_collate([])
