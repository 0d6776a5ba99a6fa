"""Version 2 records: named fields (boxes, masks, keypoints, arrays) in the format, from
datasets of target dicts, read back as tv_tensors; version 1 stays readable."""

from __future__ import annotations

import shutil
import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torchvision import tv_tensors
from torchvision.transforms import v2

import lmdb
from fastload import write_lmdb
from fastload.lmdb import LMDBDataset
from fastload.lmdb.verify import verify_lmdb
from fastload.records.format import Field, RecordFormatError, index_key, pack_record, unpack_record
from fastload.records.targets import TargetError, fields_target, resize_fields, target_fields
from fastload.testing.shapes import ShapesDetection

DTYPES = st.sampled_from(["u1", "<u2", "?", "<i4", "<f4", "<i8"])
NAMES = st.text(min_size=1, max_size=20).filter(lambda name: len(name.encode()) < 256)


@settings(max_examples=60, deadline=None)
@given(
    fields=st.dictionaries(
        NAMES,
        hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)),
        max_size=4,
    ),
    label=st.one_of(st.none(), st.integers(-5, 5)),
)
def test_fields_round_trip_exactly(fields, label):
    packed = pack_record(b"\xff\xd8jpeg", label, {k: Field("array", v) for k, v in fields.items()})
    record = unpack_record(packed, what="k", check=True)
    assert record.payload == b"\xff\xd8jpeg" and record.label == label
    assert list(record.fields) == list(fields)
    for name, array in fields.items():
        role, stored = record.fields[name]
        assert role == "array" and stored.dtype == array.dtype and stored.shape == array.shape
        assert np.array_equal(stored, array, equal_nan=True)


def test_a_record_without_fields_is_version_1_and_one_with_fields_version_2():
    assert pack_record(b"x", 3)[4] == 1
    assert pack_record(b"x", None, {})[4] == 2
    legacy = struct.pack("<4sBBBBIq", b"FLR1", 1, 0, 0, 0, zlib.crc32(b"jpeg"), 7) + b"jpeg"
    record = unpack_record(legacy, what="k", check=True)
    assert (record.payload, record.label, dict(record.fields)) == (b"jpeg", 7, {})


def test_masks_are_stored_as_png_and_read_back_exactly():
    _, target = ShapesDetection(1, size=(240, 320), max_objects=4)[0]
    masks = target["masks"].numpy()
    packed = pack_record(b"x", None, {"masks": Field("mask", masks)})
    assert b"\x89PNG" in packed and len(packed) * 20 < masks.nbytes
    assert np.array_equal(unpack_record(packed, what="k").fields["masks"].array, masks)
    as_bool = unpack_record(pack_record(b"x", None, {"m": Field("mask", masks > 0)}), what="k")
    assert np.array_equal(as_bool.fields["m"].array, masks > 0)


def test_the_checksum_covers_the_fields():
    packed = bytearray(pack_record(b"jpeg", None, {"labels": Field("array", np.arange(4))}))
    packed[40] ^= 0xFF  # inside the labels array
    with pytest.raises(RecordFormatError, match="k: CRC-32 mismatch"):
        unpack_record(bytes(packed), what="k", check=True)


def test_a_png_that_declares_more_pixels_than_its_descriptor_is_refused():
    mask = Field("mask", np.zeros((64, 64), np.uint8))
    packed = bytearray(pack_record(b"x", None, {"m": mask}))
    ihdr = packed.index(b"IHDR")
    packed[ihdr + 4 : ihdr + 12] = struct.pack(">II", 60000, 60000)
    with pytest.raises(RecordFormatError, match="k field 'm': PNG field does not match"):
        unpack_record(bytes(packed), what="k")


@pytest.mark.parametrize(
    ("cut", "message"), [(30, "malformed"), (26, "malformed")], ids=["inside", "at the count"]
)
def test_a_truncated_field_section_is_refused(cut, message):
    packed = pack_record(b"", None, {"labels": Field("array", np.arange(4))})
    with pytest.raises(RecordFormatError, match=message):
        unpack_record(packed[:cut], what="k")


def test_an_unknown_role_is_refused_when_read_as_a_target():
    fields = {"odd": Field("hologram", np.zeros(3))}
    with pytest.raises(ValueError, match="x: field 'odd' has role 'hologram', unknown"):
        fields_target(fields, (4, 4), what="x")


def test_targets_become_fields_and_back_as_tv_tensors():
    target = {
        "boxes": tv_tensors.BoundingBoxes([[1, 2, 3, 4]], format="CXCYWH", canvas_size=(8, 9)),
        "masks": tv_tensors.Mask(torch.ones(1, 8, 9, dtype=torch.uint8)),
        "labels": torch.tensor([2]),
        "image_id": 17,
    }
    fields = target_fields(target, what="x")
    assert {name: field.role for name, field in fields.items()} == {
        "boxes": "boxes.CXCYWH", "masks": "mask", "labels": "array", "image_id": "array",
    }  # fmt: skip
    back = fields_target(fields, (8, 9), what="x")
    assert back["boxes"].format == tv_tensors.BoundingBoxFormat.CXCYWH
    assert back["boxes"].canvas_size == (8, 9) and isinstance(back["masks"], tv_tensors.Mask)
    assert torch.equal(back["labels"], torch.tensor([2])) and int(back["image_id"]) == 17
    with pytest.raises(TargetError, match="x: target 'name' is a str"):
        target_fields({"name": "cat"}, what="x")


def test_a_presize_scales_boxes_and_keypoints_per_axis_and_resizes_masks_nearest():
    mask = np.zeros((1, 4, 6), np.uint8)
    mask[0, :2, :3] = 1
    fields = {
        "boxes": Field("boxes.XYWH", np.array([[2, 1, 4, 2]], np.float32)),
        "keypoints": Field("keypoints", np.array([[[6, 4]]], np.float32)),
        "masks": Field("mask", mask),
        "labels": Field("array", np.array([5])),
    }
    out = resize_fields(fields, (4, 6), (2, 3), what="x")
    assert out["boxes"].array.tolist() == [[1, 0.5, 2, 1]]
    assert out["keypoints"].array.tolist() == [[[3, 2]]]
    assert out["masks"].array.tolist() == [[[1, 1, 0], [0, 0, 0]]]
    assert out["labels"].array.tolist() == [5]
    with pytest.raises(ValueError, match="cannot presize 'r', rotated boxes"):
        resize_fields({"r": Field("boxes.XYWHR", np.zeros((1, 5)))}, (4, 6), (2, 3), what="x")


@pytest.fixture(scope="module")
def shapes_database(tmp_path_factory):
    dataset = ShapesDetection(5, size=(60, 80), seed=3)
    path = tmp_path_factory.mktemp("shapes") / "shapes.lmdb"
    meta = write_lmdb(dataset, path, num_workers=0, progress=False)
    return dataset, path, meta


def test_a_dataset_of_target_dicts_is_stored_losslessly(shapes_database):
    dataset, path, meta = shapes_database
    assert meta["version"] == 2 and meta["fields"] == ["boxes", "labels", "masks"]
    stored = LMDBDataset(path, decode="tensor")
    assert stored.fields == ["boxes", "labels", "masks"] and len(stored) == 5
    for index in range(5):
        (image, target), (want_image, want) = stored[index], dataset[index]
        assert torch.equal(image, want_image)
        assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
        assert target["boxes"].canvas_size == (60, 80) and target["boxes"].format.name == "XYXY"
        assert isinstance(target["masks"], tv_tensors.Mask)
        for name in ("boxes", "labels", "masks"):
            assert torch.equal(target[name], want[name])


def test_a_database_of_labels_stays_version_1(database):
    stored = LMDBDataset(database)
    assert stored.meta["version"] == 1 and stored.meta["fields"] is None
    assert stored.fields == [] and isinstance(stored[0][1], int)
    assert stored.record(0).fields == {}


def test_joint_transforms_move_image_and_target_together(shapes_database):
    _, path, _ = shapes_database
    plain = LMDBDataset(path, decode="tensor")
    flipped = LMDBDataset(path, decode="tensor", transforms=v2.RandomHorizontalFlip(p=1))
    (image, target), (flipped_image, flipped_target) = plain[0], flipped[0]
    assert torch.equal(flipped_image, image.flip(-1))
    assert torch.equal(flipped_target["masks"], target["masks"].flip(-1))
    x0, y0, x1, y1 = target["boxes"].unbind(-1)
    assert torch.equal(flipped_target["boxes"], torch.stack([80 - x1, y0, 80 - x0, y1], -1))
    with pytest.raises(ValueError, match=r"give transforms .* or transform/target_transform"):
        LMDBDataset(path, transform=abs, transforms=v2.RandomHorizontalFlip(p=1))


def test_presized_records_scale_their_targets_and_bytes_give_the_canvas(tmp_path):
    dataset = ShapesDetection(2, size=(60, 80), seed=3)
    path = tmp_path / "small.lmdb"
    write_lmdb(dataset, path, resize=40, num_workers=0, progress=False)
    image, target = LMDBDataset(path, decode="tensor")[1]
    _, full = dataset[1]
    assert image.shape == (3, 30, 40) and target["boxes"].canvas_size == (30, 40)
    assert torch.allclose(target["boxes"], full["boxes"] / 2)
    assert torch.equal(target["masks"], full["masks"][:, ::2, ::2])
    _, from_bytes = LMDBDataset(path, decode=None)[1]
    assert from_bytes["boxes"].canvas_size == (30, 40)
    with pytest.raises(ValueError, match="min_size decodes images smaller, its fields"):
        LMDBDataset(path, min_size=8)


def test_verify_checks_the_fields_of_every_record(shapes_database, tmp_path):
    _, path, _ = shapes_database
    assert verify_lmdb(path, progress=False).ok
    broken = tmp_path / "broken.lmdb"
    shutil.copy(path, broken)
    with lmdb.open(str(broken), subdir=False, lock=False) as env, env.begin(write=True) as txn:
        value = bytearray(txn.get(index_key(2)))
        value[30] ^= 0xFF  # inside the first field
        txn.put(index_key(2), bytes(value))
    report = verify_lmdb(broken, progress=False)
    assert report.checked == 4 and len(report.problems) == 1
    assert report.problems[0].endswith("0000000002: CRC-32 mismatch, the record is corrupt")
