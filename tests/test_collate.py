from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import default_collate

from fastload.collate import EncodedBatch, encoded_collate, uint8_collate


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


def test_encoded_collate_packs_byte_tensors_of_any_length_into_one():
    encoded = [torch.arange(n, dtype=torch.uint8) for n in (3, 5, 4)]
    images, labels = encoded_collate([(e, i) for i, e in enumerate(encoded)])
    assert isinstance(images, EncodedBatch) and labels.tolist() == [0, 1, 2]
    assert images.offsets == (0, 3, 8, 12) and images.data.shape == (12,)
    assert [image.tolist() for image in images] == [e.tolist() for e in encoded]
    assert images[-1].data_ptr() == images.data.data_ptr() + 8  # a view, not a copy
    assert encoded_collate(encoded).offsets == images.offsets
    with pytest.raises(ValueError, match="cannot collate an empty batch"):
        encoded_collate([])


@given(st.lists(st.binary(max_size=40), max_size=12))
def test_encoded_batch_gives_back_what_was_packed(images):
    batch = EncodedBatch.pack(images)
    assert len(batch) == len(images)
    assert [bytes(image.tolist()) for image in batch] == images
    assert [bytes(batch[-i].tolist()) for i in range(1, len(images) + 1)] == images[::-1]


def test_encoded_batch_indexing_and_wrong_samples_say_which():
    batch = EncodedBatch.pack([b"ab", np.frombuffer(b"cde", np.uint8)])
    with pytest.raises(IndexError, match="image 2 of a batch of 2"):
        batch[2]
    with pytest.raises(IndexError, match="image -3 of a batch of 2"):
        batch[-3]
    with pytest.raises(TypeError, match=r"sample 1: encoded images are 1-D uint8 .*float32"):
        EncodedBatch.pack([b"ab", torch.zeros(3)])
    with pytest.raises(TypeError, match=r"sample 0: .* of shape \(2, 2\)"):
        EncodedBatch.pack([torch.zeros((2, 2), dtype=torch.uint8)])


def test_encoded_batch_crosses_processes_as_one_tensor():
    batch = EncodedBatch.pack([b"ab", b"cde"])
    clone = pickle.loads(pickle.dumps(batch))
    assert clone.offsets == batch.offsets and torch.equal(clone.data, batch.data)
    loader = torch.utils.data.DataLoader(
        [(b"x" * n, n) for n in range(1, 6)],
        batch_size=5,
        num_workers=1,
        collate_fn=encoded_collate,
    )
    ((images, labels),) = list(loader)
    assert [len(image) for image in images] == labels.tolist() == [1, 2, 3, 4, 5]


def test_encoded_batch_is_not_copied_to_pinned_memory():
    batch = EncodedBatch.pack([b"ab", b"cde"])
    assert batch.pin_memory() is batch  # decoders stage the bytes themselves


def _collate_and_say_if_shared(batch):
    images = uint8_collate(batch)
    return images, images.is_shared()  # asked in the worker, before the batch is sent


def test_uint8_collate_in_a_worker_stacks_straight_into_shared_memory():
    from torch.utils.data import DataLoader

    arrays = [image(seed=i) for i in range(4)]
    loader = DataLoader(arrays, batch_size=2, num_workers=1, collate_fn=_collate_and_say_if_shared)
    batches = list(loader)
    assert [shared for _, shared in batches] == [True, True]
    assert not uint8_collate(arrays[:2]).is_shared()  # in the main process: plain memory
    want = [uint8_collate(arrays[i : i + 2]) for i in (0, 2)]
    assert all(torch.equal(got, w) for (got, _), w in zip(batches, want, strict=True))


# --- padded batches of variable-size images ------------------------------------------------------


def test_padded_collate_pads_to_the_largest_and_keeps_sizes_and_targets():
    from torchvision import tv_tensors

    from fastload.collate import padded_collate

    first, second = image(30, 40, seed=1), image(50, 20, seed=2)
    boxes = [
        tv_tensors.BoundingBoxes([[1, 2, 3, 4]], format="XYXY", canvas_size=(30, 40)),
        tv_tensors.BoundingBoxes([[0, 0, 5, 5], [6, 6, 9, 9]], format="XYXY", canvas_size=(50, 20)),
    ]
    masks = [tv_tensors.Mask(torch.ones(30, 40, dtype=torch.uint8)),
             tv_tensors.Mask(torch.full((50, 20), 2, dtype=torch.uint8))]  # fmt: skip
    batch = [(first, boxes[0], masks[0], 7), (second, boxes[1], masks[1], 8)]
    images, valid, sizes, out_boxes, out_masks, labels = padded_collate(batch, multiple=32)
    assert images.shape == (2, 3, 64, 64) and images.dtype == torch.uint8
    assert sizes.tolist() == [[30, 40], [50, 20]]
    assert torch.equal(images[0, :, :30, :40], torch.from_numpy(first).permute(2, 0, 1))
    assert (images[0, :, 30:] == 0).all() and (images[0, :, :, 40:] == 0).all()
    assert valid.sum(dim=(1, 2)).tolist() == [1200, 1000] and valid[1, :50, :20].all()
    assert type(out_masks) is tv_tensors.Mask and out_masks.shape == (2, 64, 64)
    assert torch.equal(out_masks.bool(), valid)  # the masks padded with their image
    assert [b.canvas_size for b in out_boxes] == [(64, 64), (64, 64)]
    assert out_boxes[1].tolist() == [[0, 0, 5, 5], [6, 6, 9, 9]] and labels == (7, 8)


def test_padded_collate_without_a_multiple_pads_to_the_largest_exactly():
    from fastload.collate import padded_collate

    images, valid, sizes = padded_collate([(image(3, 9),), (image(7, 2),)])
    assert images.shape == (2, 3, 7, 9) and valid.shape == (2, 7, 9)
    assert sizes.tolist() == [[3, 9], [7, 2]]


@pytest.mark.parametrize(
    ("batch", "kwargs", "message"),
    [
        ([], {}, "cannot collate an empty batch"),
        ([(image(4, 4),)], {"multiple": 0}, r"multiple must be an int >= 1, got 0"),
        ([(image(4, 4),), (np.zeros((4, 4, 1), np.uint8),)], {}, r"differ in channels \[1, 3\]"),
    ],
)
def test_padded_collate_refuses_bad_batches(batch, kwargs, message):
    from fastload.collate import padded_collate

    with pytest.raises(ValueError, match=message):
        padded_collate(batch, **kwargs)


def test_padded_collate_pads_masks_inside_target_dicts():
    from torchvision import tv_tensors

    from fastload.collate import padded_collate

    target = {"masks": tv_tensors.Mask(torch.ones(2, 5, 6, dtype=torch.uint8)), "id": 3}
    images, valid, _, targets = padded_collate([(image(5, 6), target), (image(7, 7), target)])
    assert images.shape == (2, 3, 7, 7)
    assert targets[0]["masks"].shape == (2, 7, 7) and targets[0]["id"] == 3
    assert type(valid) is tv_tensors.Mask and valid[0].sum() == 30


def test_padded_collate_refuses_images_of_mixed_dtypes_naming_both_samples():
    from fastload.collate import padded_collate

    float_image = torch.full((3, 4, 4), 0.5)  # scaled 0-1, would become 0 as uint8
    batch = [(image(4, 4),), (image(4, 4),), (float_image,)]
    message = r"differ in dtype: sample 0 is torch\.uint8, sample 2 is torch\.float32"
    with pytest.raises(ValueError, match=message):
        padded_collate(batch)


def test_padded_collate_keeps_float_images_of_one_dtype():
    from fastload.collate import padded_collate

    images, _, _ = padded_collate([(torch.full((3, 2, 2), 0.5),), (torch.full((3, 3, 1), 0.25),)])
    assert images.dtype == torch.float32 and images[0, :, :2, :2].eq(0.5).all()
    assert images[1, :, :3, :1].eq(0.25).all()


def test_padded_collate_refuses_a_mask_larger_than_its_image():
    from torchvision import tv_tensors

    from fastload.collate import padded_collate

    fits = {"masks": tv_tensors.Mask(torch.ones(1, 6, 6, dtype=torch.uint8))}
    too_big = {"masks": tv_tensors.Mask(torch.ones(1, 9, 6, dtype=torch.uint8))}
    batch = [(image(6, 6), fits), (image(8, 8), too_big)]  # 9 rows: padding would crop one
    with pytest.raises(ValueError, match=r"sample 1: a Mask of size \(9, 6\) does not fit its "
                       r"image of size \(8, 8\)"):  # fmt: skip
        padded_collate(batch)
