"""The LMDB surface attacked: tampered and forged records, datasets whose targets or
images cannot be stored, pipes and devices among the images, an empty source, and a
database written inside the folder it converts. Each ends in an exception naming the
record, item or file; never a crash, a hang, a wrong sample or a half-written file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision import tv_tensors

import lmdb
from fastload import LMDBDataset, make_image_folder, write_lmdb
from fastload.decode.opencv import ImageDecodeError
from fastload.lmdb.verify import verify_lmdb
from fastload.records.format import META_KEY, Field, RecordFormatError, index_key, pack_record
from fastload.records.targets import TargetError
from fastload.testing.shapes import ShapesDetection

sys.path.insert(0, str(Path(__file__).parent))
from conftest import NumberedImages

# --- tampered and forged records ------------------------------------------------------------


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """Three 80x60 detection records (boxes, labels, masks): version 2."""
    path = tmp_path_factory.mktemp("shapes") / "shapes.lmdb"
    write_lmdb(ShapesDetection(3, size=(60, 80), seed=3), path, num_workers=0, progress=False)
    return path


def put(path: Path, index: int, value: bytes) -> None:
    with lmdb.open(str(path), subdir=False, lock=False) as env, env.begin(write=True) as txn:
        txn.put(index_key(index), value)


def stored(path: Path, index: int) -> bytes:
    with (
        lmdb.open(str(path), subdir=False, readonly=True, lock=False) as env,
        env.begin() as txn,
    ):
        return bytes(txn.get(index_key(index)))


@pytest.mark.parametrize("where", [20, 60, -1], ids=["field count", "boxes", "payload"])
def test_a_byte_flipped_after_the_crc_is_refused_when_read_not_read_wrong(shapes, tmp_path, where):
    path = tmp_path / "copy.lmdb"
    shutil.copy(shapes, path)
    value = bytearray(stored(path, 1))
    value[where] ^= 0x01
    put(path, 1, bytes(value))
    dataset = LMDBDataset(path, decode="tensor")
    with pytest.raises(RecordFormatError, match=r"copy.lmdb:0000000001: CRC-32 mismatch"):
        dataset[1]
    assert dataset[0][1]["boxes"].shape[-1] == 4  # the others read as before
    report = verify_lmdb(path, progress=False)
    assert report.checked == 2 and report.problems == [
        f"{path}:0000000001: CRC-32 mismatch, the record is corrupt"
    ]


def forged(fields: dict[str, Field], payload=None) -> bytes:
    """A version 2 record with a valid CRC: what an attacker writes, not a damaged one."""
    image = np.zeros((60, 80, 3), np.uint8) if payload is None else payload
    return pack_record(image, None, fields)


def with_checksum(value: bytes) -> bytes:
    """``value`` with its version 2 CRC recomputed after it was edited."""
    return value[:8] + struct.pack("<I", zlib.crc32(value[20:])) + value[12:]


BOXES = Field("boxes.XYXY", np.array([[1, 2, 30, 40]], np.float32))
HUGE = with_checksum(
    forged({"boxes": BOXES}).replace(
        b"\x03<f4\x02\x01\x00\x00\x00\x04\x00\x00\x00",
        b"\x03<f4\x02\xff\xff\xff\x7f\x04\x00\x00\x00",
    )
)
NEGATIVE_PNG = bytearray(forged({"masks": Field("mask", np.ones((1, 60, 80), np.uint8))}))
NEGATIVE_PNG[NEGATIVE_PNG.index(b"\x89PNG") - 4 : NEGATIVE_PNG.index(b"\x89PNG")] = b"\xff" * 4
VERSION_0 = bytearray(forged({"boxes": BOXES}))
VERSION_0[4] = 0
RESERVED = bytearray(forged({"boxes": BOXES}))
RESERVED[7] = 9

FORGERIES = {
    "huge array": (HUGE, r"field 'boxes': array needs 34359738352 bytes, record is shorter"),
    "unknown role": (
        forged({"boxes": Field("hologram", np.zeros(3))}),
        r"field 'boxes' has role 'hologram', unknown to this fastload",
    ),
    "boxes of 7": (
        forged({"boxes": Field("boxes.XYXY", np.zeros((2, 7), np.float32))}),
        r"field 'boxes': XYXY boxes of shape \(2, 7\), not \(N, 4\)",
    ),
    "mask size": (
        forged({"masks": Field("mask", np.zeros((1, 5, 5), np.uint8))}),
        r"field 'masks': masks of shape \(1, 5, 5\) for an image of \(60, 80\)",
    ),
    "keypoints": (
        forged({"kp": Field("keypoints", np.zeros((2, 3), np.float32))}),
        r"field 'kp': keypoints of shape \(2, 3\), not \(\.\.\., 2\)",
    ),
    "float128": (
        with_checksum(
            forged({"a": Field("array", np.zeros(2, np.float64))}).replace(b"\x03<f8", b"\x04<f16")
        ),
        r"field 'a': refusing array of dtype float128",
    ),
    "negative PNG length": (with_checksum(bytes(NEGATIVE_PNG)), r"field 'masks': malformed PNG"),
    "version 0": (bytes(VERSION_0), r"malformed header \(version 0, reserved 0\)"),
    "reserved byte": (bytes(RESERVED), r"malformed header \(version 2, reserved 9\)"),
    "float image": (
        forged({"boxes": BOXES}, payload=np.zeros((60, 80, 3), np.float64)),
        r"a stored image of shape \(60, 80, 3\) and dtype float64, not a \(H, W\[, C\]\) uint8",
    ),
    "1-D image": (
        forged({"boxes": BOXES}, payload=np.zeros(14400, np.uint8)),
        r"a stored image of shape \(14400,\)",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("value", "message"), FORGERIES.values(), ids=FORGERIES)
def test_a_forged_record_with_a_valid_crc_is_refused_naming_it(shapes, tmp_path, value, message):
    path = tmp_path / "copy.lmdb"
    shutil.copy(shapes, path)
    put(path, 2, value)
    with pytest.raises(RecordFormatError, match=r"copy.lmdb:(000000000)?2\b.*" + message):
        LMDBDataset(path, decode="tensor")[2]
    report = verify_lmdb(path, progress=False)
    assert report.checked == 2 and len(report.problems) == 1
    assert "copy.lmdb:" in report.problems[0] and "2" in report.problems[0].split(":")[1]


def test_a_big_endian_array_is_stored_little_endian_and_read_as_it_was():
    array = np.arange(6, dtype=">f4").reshape(2, 3)
    value = pack_record(b"x", None, {"a": Field("array", array)})
    assert b"<f4" in value and b">f4" not in value
    # as an older writer stored it: big-endian descriptor and bytes
    forged_value = with_checksum(
        value.replace(b"<f4", b">f4").replace(
            array.astype("<f4").tobytes(), array.astype(">f4").tobytes()
        )
    )
    from fastload.records.format import unpack_record
    from fastload.records.targets import fields_target

    for candidate in (value, forged_value):
        fields = unpack_record(candidate, what="k", check=True).fields
        assert fields_target(fields, (4, 4), what="k")["a"].tolist() == array.tolist()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("fields", "abc", "metadata fields 'abc' is not a list of names"),
     ("classes", [1, 2], r"metadata classes \[1, 2\] is not a list of names")],
)  # fmt: skip
def test_tampered_metadata_is_refused(shapes, tmp_path, key, value, message):
    path = tmp_path / "copy.lmdb"
    shutil.copy(shapes, path)
    with lmdb.open(str(path), subdir=False, lock=False) as env, env.begin(write=True) as txn:
        meta = json.loads(bytes(txn.get(META_KEY)))
        txn.put(META_KEY, json.dumps(meta | {key: value}).encode())
    with pytest.raises(RecordFormatError, match=f"copy.lmdb: {message}"):
        LMDBDataset(path)


# --- datasets whose targets or images cannot be stored -------------------------------------


class Targets(torch.utils.data.Dataset):
    """Four 80x60 images with ShapesDetection's targets; item 2's target is ``change``d."""

    def __init__(self, change) -> None:
        self.shapes, self.change = ShapesDetection(4, size=(60, 80), seed=3), change

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        image, target = self.shapes[index]
        return self.change(image, dict(target)) if index == 2 else (image, target)


def boxes(values, box_format="XYXY", canvas=(60, 80)):
    return tv_tensors.BoundingBoxes(values, format=box_format, canvas_size=canvas)


def new_target(**changes):
    return lambda image, target: (image, target | changes)


BAD_ITEMS = {
    "nan box": (new_target(boxes=boxes([[1.0, 2, float("nan"), 4]])), TargetError,
                r"target 'boxes': boxes that are not finite"),
    "inf box": (new_target(boxes=boxes([[1.0, 2, 3, float("inf")]])), TargetError,
                r"target 'boxes': boxes that are not finite"),
    "box outside": (new_target(boxes=boxes([[1e6, 2, 1e6 + 5, 4]])), TargetError,
                    r"target 'boxes': boxes outside the 80x60 image \(x 1000000.0..1000005.0"),
    "XYXY reversed": (new_target(boxes=boxes([[30.0, 2, 10, 4]])), TargetError,
                      "target 'boxes': XYXY boxes with a negative width or height"),
    "XYWH negative": (new_target(boxes=boxes([[30.0, 2, -10, 4]], "XYWH")), TargetError,
                      "target 'boxes': XYWH boxes with a negative width or height"),
    "other canvas": (new_target(boxes=boxes([[1.0, 2, 3, 4]], canvas=(600, 800))), TargetError,
                     r"target 'boxes': boxes for a canvas of \(600, 800\), the image is "
                     r"\(60, 80\)"),
    "mask size": (new_target(masks=tv_tensors.Mask(torch.zeros(1, 30, 40, dtype=torch.uint8))),
                  TargetError, "target 'masks': masks of 40x30, the image is 80x60"),
    "fields differ": (lambda image, target: (image, {"boxes": target["boxes"]}), TargetError,
                      r"target fields \{'boxes': 'boxes.XYXY'\} differ from item 0's"),
    "role differs": (new_target(masks=torch.zeros(1, 60, 80, dtype=torch.uint8)), TargetError,
                     r"target fields \{.*'masks': 'array'\} differ from item 0's \{.*'masks': "
                     r"'mask'\}"),
    "a label": (lambda image, target: (image, 3), TargetError,
                "gives a label, item 0 a target dict; every item of a database holds the same"),
    "string": (new_target(name="cat"), TargetError, "target 'name' is a str; records store"),
    "float128": (new_target(labels=np.zeros(3, np.longdouble)), TargetError,
                 "only bool, integer and float arrays of at most 64 bits can be stored"),
    "empty image": (lambda image, target: (image[:, :0], target), ImageDecodeError,
                    r"an empty image, 80x0"),
    "1-D image": (lambda image, target: (image.flatten(), target), ImageDecodeError,
                  r"an image of shape \(14400,\)"),
    "5 channels": (lambda image, target: (torch.zeros(5, 60, 80, dtype=torch.uint8), target),
                   ImageDecodeError, r"an image of shape \(5, 60, 80\)"),
}  # fmt: skip


@pytest.mark.parametrize(("change", "error", "message"), BAD_ITEMS.values(), ids=BAD_ITEMS)
def test_an_item_that_cannot_be_stored_is_named_and_skip_bad_skips_it(
    tmp_path, change, error, message
):
    path = tmp_path / "db"
    with pytest.raises(error, match=r"^Targets\[2\]: " + message):
        write_lmdb(Targets(change), path, num_workers=0, commit_every=1, progress=False)
    with pytest.raises(RecordFormatError, match="incomplete database, a conversion stopped"):
        LMDBDataset(path)  # the two records before it kept for --resume, never read as whole
    meta = write_lmdb(Targets(change), tmp_path / "skipped", skip_bad=True, num_workers=0,
                      progress=False)  # fmt: skip
    assert [entry["path"] for entry in meta["skipped"]] == ["Targets[2]"]
    assert re.search(message, meta["skipped"][0]["error"])
    dataset = LMDBDataset(tmp_path / "skipped", decode="tensor")
    assert len(dataset) == 3 and all(dataset[i][1]["boxes"].shape[-1] == 4 for i in range(3))


class Labels(torch.utils.data.Dataset):
    """NumberedImages, item 1's label replaced by ``label``."""

    def __init__(self, label) -> None:
        self.label = label

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int):
        image, label = NumberedImages(3)[index]
        return image, self.label if index == 1 else label


@pytest.mark.parametrize(
    ("label", "message"),
    [("cat", "only bool, integer and float arrays of at most 64 bits can be stored, got dtype <U3"),
     (2**70, "label 1180591620717411303424 does not fit in 64 bits"),
     ({"boxes": torch.zeros(0, 4)}, "gives a target dict, item 0 a label")],
)  # fmt: skip
def test_a_label_that_cannot_be_stored_is_named(tmp_path, label, message):
    with pytest.raises(TargetError, match=r"^Labels\[1\]: " + message):
        write_lmdb(Labels(label), tmp_path / "db", num_workers=0, progress=False)


def test_a_float_label_is_stored_as_it_is_not_truncated(tmp_path):
    write_lmdb(Labels(torch.tensor(0.75)), tmp_path / "db", num_workers=0, progress=False)
    assert LMDBDataset(tmp_path / "db")[1][1] == 0.75


class First(Targets):
    """Targets whose item 0 has a NaN box (its fields as the others': the layout is fine)."""

    def __init__(self) -> None:
        super().__init__(BAD_ITEMS["nan box"][0])

    def __getitem__(self, index: int):
        return super().__getitem__(2 if index == 0 else index)


def test_item_0_that_cannot_be_stored_leaves_no_file(tmp_path):
    class Bad(Labels):
        def __getitem__(self, index):
            return NumberedImages(3)[index][0], {"name": "cat"}

    with pytest.raises(TargetError, match=r"^Bad\[0\]: target 'name' is a str"):
        write_lmdb(Bad(None), tmp_path / "db", num_workers=0, progress=False)
    with pytest.raises(TargetError, match=r"^First\[0\]: target 'boxes': boxes that are not"):
        write_lmdb(First(), tmp_path / "db", num_workers=0, progress=False)
    assert os.listdir(tmp_path) == []  # nothing committed: no file, no lock file


@pytest.mark.parametrize("source", [[], NumberedImages(0)], ids=["list", "dataset"])
def test_an_empty_source_is_refused_and_writes_nothing(tmp_path, source):
    with pytest.raises(ValueError, match=r": no images, nothing to convert"):
        write_lmdb(source, tmp_path / "db", num_workers=0, progress=False)
    assert os.listdir(tmp_path) == []


# --- files that are not files; a database inside the folder it converts ---------------------


@pytest.fixture
def folder(tmp_path):
    return make_image_folder(tmp_path / "images", num_classes=2, images_per_class=3, size=(64, 48))


@pytest.fixture
def no_hang():
    """Fail, not hang, if a read blocks: SIGALRM interrupts it."""

    def stop(*_):
        raise TimeoutError("the conversion blocked")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", ["pipe", "device"])
def test_a_pipe_or_device_among_the_images_is_named_not_read(folder, tmp_path, no_hang, kind):
    odd = folder / "class_00" / "img_00001.jpg"
    odd.unlink()
    if kind == "pipe":
        os.mkfifo(odd)  # reading it waits for a writer forever
    else:
        odd.symlink_to("/dev/zero")  # reading it never ends
    with pytest.raises(
        ImageDecodeError, match=r"class_00/img_00001.jpg: a pipe, socket or device, not a file"
    ):
        write_lmdb(folder, tmp_path / "db", num_workers=0, progress=False)
    meta = write_lmdb(folder, tmp_path / "db2", skip_bad=True, num_workers=0, progress=False)
    assert meta["count"] == 5 and meta["skipped"][0]["path"] == str(odd)


def test_a_database_inside_the_folder_it_converts_is_never_read_as_an_image(folder):
    path = folder / "class_00" / "zz.png"  # listed after the class's images, on a resume
    bad = folder / "class_01" / "img_00004.jpg"
    good = bad.read_bytes()
    bad.write_bytes(b"not a JPEG")
    with pytest.raises(ImageDecodeError, match=r"img_00004\.jpg"):
        write_lmdb(folder, path, num_workers=0, progress=False)
    bad.write_bytes(good)
    meta = write_lmdb(folder, path, resume=True, num_workers=0, progress=False)
    assert meta["count"] == 6 and meta["skipped"] == []
    assert [LMDBDataset(path)[i][1] for i in range(6)] == [0, 0, 0, 1, 1, 1]
    meta = write_lmdb(folder, path, resume=True, num_workers=0, progress=False)
    assert meta["count"] == 6  # complete: resuming again changes nothing


def test_the_destination_is_never_the_source_folder(folder):
    with pytest.raises(IsADirectoryError, match=r"images is a directory; give the path of the"):
        write_lmdb(folder, folder, num_workers=0, progress=False)
