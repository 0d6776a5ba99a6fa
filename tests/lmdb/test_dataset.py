from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import lmdb
from fastload import FastLoader, LMDBDataset, write_lmdb
from fastload.decode.opencv import ImageDecodeError
from fastload.records.format import (
    META_KEY,
    PROGRESS_KEY,
    RecordFormatError,
    index_key,
    pack_record,
)

sys.path.insert(0, str(Path(__file__).parent))
from conftest import NumberedImages, rgb
from fastload.lmdb.verify import verify_lmdb


def test_decode_modes(image_folder, database):
    first = sorted((image_folder / "class_00").glob("*.jpg"))[0]
    as_array, label = LMDBDataset(database, decode="numpy")[0]
    as_tensor, _ = LMDBDataset(database, decode="tensor")[0]
    as_bytes, _ = LMDBDataset(database, decode=None)[0]
    assert label == 0
    assert as_array.shape == (48, 64, 3) and as_array.dtype == np.uint8
    assert np.array_equal(as_array, rgb(first))
    assert as_tensor.shape == (3, 48, 64) and torch.equal(
        as_tensor, torch.from_numpy(as_array).permute(2, 0, 1)
    )
    assert as_bytes.dtype == torch.uint8 and as_bytes.dim() == 1
    assert bytes(as_bytes.numpy()) == first.read_bytes()


def test_transforms_are_applied(database):
    dataset = LMDBDataset(
        database, transform=lambda image: image.shape, target_transform=lambda y: -y
    )
    assert dataset[3] == ((48, 64, 3), -1)


def test_negative_and_out_of_range_indices(database):
    dataset = LMDBDataset(database)
    assert dataset[-1][1] == dataset[5][1] == 1
    with pytest.raises(IndexError, match=r"index 6 is out of range for .*train.lmdb \(6 records\)"):
        dataset[6]


def test_bad_decode_argument(database):
    with pytest.raises(ValueError, match="decode must be 'numpy', 'tensor' or None, got 'pil'"):
        LMDBDataset(database, decode="pil")


def test_a_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing.lmdb: no such fastload database"):
        LMDBDataset(tmp_path / "missing.lmdb")


def test_a_directory_that_is_not_a_database(tmp_path):
    with pytest.raises(
        RecordFormatError, match=r"a directory without data.mdb, not a fastload database"
    ):
        LMDBDataset(tmp_path)


def test_a_file_that_is_not_lmdb(tmp_path):
    (tmp_path / "notes.txt").write_text("hello " * 2000)
    with pytest.raises(RecordFormatError, match=r"notes.txt: not an LMDB file"):
        LMDBDataset(tmp_path / "notes.txt")


def raw_database(path: Path, items: dict[bytes, bytes]) -> Path:
    with lmdb.open(str(path), subdir=False) as env, env.begin(write=True) as txn:
        for key, value in items.items():
            txn.put(key, value)
    return path


def meta(**fields) -> bytes:
    return json.dumps({"format": "fastload-lmdb", "version": 1, "count": 1} | fields).encode()


def test_an_lmdb_database_of_another_tool(tmp_path):
    path = raw_database(tmp_path / "other.lmdb", {b"0": b"value"})
    with pytest.raises(
        RecordFormatError, match="no fastload metadata record, not a fastload database"
    ):
        LMDBDataset(path)


def test_an_incomplete_database_says_how_to_finish_it(tmp_path):
    path = raw_database(tmp_path / "part.lmdb", {index_key(0): b"x", PROGRESS_KEY: b"{}"})
    finish = r"again with resume=True \(`fastload convert --resume`\) to finish it"
    with pytest.raises(RecordFormatError, match=r"incomplete database.*" + finish):
        LMDBDataset(path)


def test_a_newer_format_version(tmp_path):
    path = raw_database(tmp_path / "new.lmdb", {META_KEY: meta(version=3)})
    with pytest.raises(
        RecordFormatError, match="format version 3 is newer than this fastload reads"
    ):
        LMDBDataset(path)


class Exploit:
    """Unpickling this would create ``marker``: the classic poisoned LMDB recipe."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_record_is_refused_without_being_executed(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Exploit(marker))
    path = raw_database(tmp_path / "evil.lmdb", {index_key(0): payload, META_KEY: meta()})
    dataset = LMDBDataset(path)
    with pytest.raises(
        RecordFormatError, match=r"not a fastload record \(it holds a pickle; refusing"
    ):
        dataset[0]
    assert not marker.exists()


def test_a_corrupt_stored_image_names_its_record(tmp_path):
    path = raw_database(
        tmp_path / "bad.lmdb", {index_key(0): pack_record(b"\xff\xd8 junk", 0), META_KEY: meta()}
    )
    with pytest.raises(ImageDecodeError, match=r"bad.lmdb:0: not an image OpenCV can decode"):
        LMDBDataset(path)[0]


def test_two_datasets_on_one_file_in_one_process(database):
    first, second = LMDBDataset(database), LMDBDataset(database, decode="tensor")
    assert first[2][1] == second[2][1]
    assert np.array_equal(first[2][0], second[2][0].permute(1, 2, 0).numpy())


def test_pickles_after_use(database):
    dataset = LMDBDataset(database)
    dataset[0]
    clone = pickle.loads(pickle.dumps(dataset))
    assert np.array_equal(clone[4][0], dataset[4][0])


def labels_through(loader) -> list[int]:
    return [label for _, labels in loader for label in labels.tolist()]


def test_fastloader_workers_fork_after_the_dataset_was_used(database):
    dataset = LMDBDataset(database, decode="tensor")
    dataset[0]  # opened in the parent before the workers fork
    loader = FastLoader(dataset, batch_size=2, num_workers=2)
    for _ in range(2):
        assert labels_through(loader) == [0, 0, 0, 1, 1, 1]


@pytest.mark.slow
def test_fastloader_with_the_spawn_context(database):
    dataset = LMDBDataset(database, decode="tensor")
    dataset[0]
    loader = FastLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context="spawn")
    assert labels_through(loader) == [0, 0, 0, 1, 1, 1]


def checksum_all(path: str) -> list[int]:
    dataset = LMDBDataset(path)
    return [int(dataset[i][0].sum()) + dataset[i][1] for i in range(len(dataset))]


def test_several_processes_read_at_once(database):
    expected = checksum_all(str(database))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(checksum_all, [str(database)] * 8)
    assert all(result == expected for result in results)


def test_batched_reads_equal_single_reads(database):
    dataset = LMDBDataset(database, decode="tensor")
    batch = dataset.__getitems__([5, 0, 3])
    for (image, label), index in zip(batch, [5, 0, 3], strict=True):
        want_image, want_label = dataset[index]
        assert label == want_label and torch.equal(image, want_image)


def copy_of(database, tmp_path) -> Path:
    path = tmp_path / "copy.lmdb"
    path.write_bytes(Path(database).read_bytes())
    return path


def test_a_truncated_file_is_refused_at_open_not_with_sigbus(database, tmp_path):
    path = copy_of(database, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        RecordFormatError, match=r"copy.lmdb: truncated, .* bytes where the database"
    ):
        LMDBDataset(path)


@pytest.mark.parametrize("content", [b"", None], ids=["empty file", "fifo"])
def test_an_empty_file_or_a_fifo_is_refused_without_blocking(tmp_path, content):
    path = tmp_path / "db.lmdb"
    if content is None:
        os.mkfifo(path)  # opening it for reading would block forever
    else:
        path.write_bytes(content)
    with pytest.raises(RecordFormatError, match=r"db.lmdb: (empty file|not a regular file)"):
        LMDBDataset(path)


def rewrite_meta(path: Path, **changes) -> None:
    with lmdb.open(str(path), subdir=False) as env, env.begin(write=True) as txn:
        meta = json.loads(bytes(txn.get(META_KEY)))
        txn.put(META_KEY, json.dumps(meta | changes).encode())


@pytest.mark.parametrize(("count", "message"), [
    (10**12, "metadata says 1,000,000,000,000 records, the file holds 6"),
    (5, "metadata says 5 records, the file holds 6"),
    (-1, "metadata count -1 is not a count"),
    ("6", "metadata count '6' is not a count"),
])  # fmt: skip
def test_a_metadata_count_that_lies_is_refused(database, tmp_path, count, message):
    path = copy_of(database, tmp_path)
    rewrite_meta(path, count=count)
    with pytest.raises(RecordFormatError, match=message):
        LMDBDataset(path)


def test_a_database_written_again_at_the_same_path_is_read_afresh(tmp_path):
    path = tmp_path / "db.lmdb"
    write_lmdb(NumberedImages(4), path, num_workers=0, progress=False)
    assert LMDBDataset(path)[3][1] == 3
    path.unlink()
    write_lmdb(NumberedImages(6, offset=100), path, num_workers=0, progress=False)
    fresh = LMDBDataset(path)
    assert len(fresh) == 6 and fresh[3][1] == 103


@pytest.mark.parametrize("descriptor", [
    b"\x03<u1\x05" + struct.pack("<5I", *[2**32 - 1] * 5),  # a product that wraps in int64
    b"\x03<u1\xff" + b"\x01\x00\x00\x00" * 255,  # 255 dimensions
    b"\x05zz<9\x01\x01\x00\x00\x00",  # not a dtype
])  # fmt: skip
def test_a_malformed_array_names_its_record_and_verify_goes_on(database, tmp_path, descriptor):
    path = copy_of(database, tmp_path)
    body = descriptor + b"\x00" * 64  # forged with its CRC: the parser must refuse it
    header = struct.pack("<4sBBBBIq", b"FLR1", 1, 1, 2, 0, zlib.crc32(body), 0)  # array, no label
    with lmdb.open(str(path), subdir=False) as env, env.begin(write=True) as txn:
        txn.put(index_key(2), header + body)
    with pytest.raises(RecordFormatError, match=r"copy.lmdb:0000000002: (malformed|array)"):
        LMDBDataset(path)[2]
    report = verify_lmdb(path, progress=False)
    assert report.checked == 5 and len(report.problems) == 1
    assert "0000000002" in report.problems[0]
