from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import ImageFolder

import lmdb
from fastload import LMDBDataset, make_image_folder, write_lmdb
from fastload.decode.opencv import ImageDecodeError
from fastload.lmdb.store import lock_path, read_transaction
from fastload.records.format import META_KEY, PROGRESS_KEY, RecordFormatError

sys.path.insert(0, str(Path(__file__).parent))
from conftest import NumberedImages, rgb


def test_folder_round_trip_keeps_bytes_and_imagefolder_order(image_folder, database):
    reference = ImageFolder(str(image_folder))
    dataset = LMDBDataset(database)
    assert len(dataset) == len(reference) == 6
    assert dataset.classes == reference.classes
    assert dataset.class_to_idx == reference.class_to_idx
    for index, (path, label) in enumerate(reference.samples):
        record = dataset.record(index, check=True)
        assert record.payload == Path(path).read_bytes()  # the file, byte for byte
        image, got_label = dataset[index]
        assert got_label == label
        assert np.array_equal(image, rgb(path))
    assert not lock_path(database).exists()


def test_list_of_files_keeps_its_order_and_labels(image_folder, tmp_path):
    files = sorted(image_folder.rglob("*.jpg"), reverse=True)
    sources = [(path, 10 + i) for i, path in enumerate(files)]
    meta = write_lmdb(sources, tmp_path / "db", num_workers=0, progress=False)
    dataset = LMDBDataset(tmp_path / "db")
    assert meta["count"] == len(files) and dataset.classes == []
    assert [dataset[i][1] for i in range(len(files))] == [10 + i for i in range(len(files))]
    assert dataset.record(0).payload == files[0].read_bytes()


@pytest.mark.parametrize("kind", ["ndarray", "tensor", "pil"])
def test_dataset_images_are_stored_losslessly_as_arrays(kind, tmp_path):
    generator = np.random.default_rng(0)
    images = [generator.integers(0, 256, (7, 9, 3), dtype=np.uint8) for _ in range(3)]
    convert = {
        "ndarray": lambda a: a,
        "tensor": lambda a: torch.from_numpy(a).permute(2, 0, 1),
        "pil": Image.fromarray,
    }[kind]
    samples = [(convert(image), np.array([i, 1 - i])) for i, image in enumerate(images)]
    meta = write_lmdb(samples, tmp_path / "db", num_workers=0, progress=False)
    assert meta["payload"] == "array"
    dataset = LMDBDataset(tmp_path / "db")
    for i, image in enumerate(images):
        got, label = dataset[i]
        assert np.array_equal(got, image) and label.tolist() == [i, 1 - i]


def test_presizing_shrinks_the_longest_side_and_reencodes(image_folder, tmp_path):
    meta = write_lmdb(
        image_folder, tmp_path / "db", resize=32, quality=80, num_workers=0, progress=False
    )
    assert (meta["resize"], meta["quality"]) == (32, 80)
    image, _ = LMDBDataset(tmp_path / "db")[0]
    assert image.shape == (24, 32, 3)  # 64x48 -> longest side 32, aspect kept


def test_a_tiny_map_grows_by_itself(image_folder, tmp_path):
    meta = write_lmdb(
        image_folder,
        tmp_path / "db",
        map_size=1 << 14,
        commit_every=2,
        num_workers=0,
        progress=False,
    )
    assert meta["count"] == 6
    with lmdb.open(str(tmp_path / "db"), subdir=False, readonly=True, lock=False) as env:
        assert env.info()["map_size"] > 1 << 14  # no dataset has opened it in this process


def test_worker_processes_give_the_same_database(image_folder, database, tmp_path):
    write_lmdb(image_folder, tmp_path / "db", num_workers=2, commit_every=2, progress=False)
    serial, parallel = LMDBDataset(database), LMDBDataset(tmp_path / "db")
    for index in range(len(serial)):
        assert serial.record(index) == parallel.record(index)


def test_an_existing_destination_is_refused_and_kept(database):
    before = database.read_bytes()
    with pytest.raises(FileExistsError) as refused:
        write_lmdb(database.parent, database, progress=False)
    # the keyword for a caller of write_lmdb, the flag for one of `fastload convert`
    assert str(refused.value) == (
        f"{database} exists; pass resume=True (`fastload convert --resume`) to finish an "
        "interrupted conversion, or remove it to start again"
    )
    assert database.read_bytes() == before


def test_resuming_a_complete_database_changes_nothing(image_folder, database):
    before = database.read_bytes()
    meta = write_lmdb(image_folder, database, resume=True, num_workers=0, progress=False)
    assert meta["count"] == 6 and database.read_bytes() == before


KILLED_CONVERSION = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from conftest import NumberedImages
    from fastload import write_lmdb
    write_lmdb(
        NumberedImages(40, delay=0.02), {path!r}, num_workers=0, commit_every=4, progress=False
    )
    """
)


def committed_records(path: Path) -> int:
    try:
        with (
            lmdb.open(str(path), subdir=False, readonly=True, lock=False) as env,
            env.begin() as txn,
        ):
            return txn.stat()["entries"] - (txn.get(PROGRESS_KEY) is not None)
    except lmdb.Error:
        return 0


@pytest.mark.slow
def test_a_conversion_killed_with_sigkill_resumes_with_every_record_once(tmp_path):
    path = tmp_path / "db"
    code = KILLED_CONVERSION.format(tests=str(Path(__file__).parent), path=str(path))
    process = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while committed_records(path) < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = committed_records(path)
    assert 12 <= written < 40, "the kill must land part-way through"
    with pytest.raises(
        RecordFormatError, match="incomplete database, a conversion stopped part-way"
    ):
        LMDBDataset(path)

    meta = write_lmdb(NumberedImages(40), path, resume=True, num_workers=0, progress=False)
    assert meta["count"] == 40
    dataset = LMDBDataset(path, decode="tensor")
    for index in range(40):
        image, label = dataset[index]
        assert label == index and image.unique().tolist() == [index]
    txn = read_transaction(path)  # the one this process's datasets share
    assert txn.stat()["entries"] == 41  # 40 records and the metadata, nothing else
    assert txn.get(PROGRESS_KEY) is None


def test_resume_refuses_a_different_source(tmp_path):
    path = tmp_path / "db"
    with lmdb.open(str(path), subdir=False) as env, env.begin(write=True) as txn:
        txn.put(
            PROGRESS_KEY,
            b'{"fingerprint": {"source": "x"}, "next_position": 2, "count": 2, "skipped": []}',
        )
    with pytest.raises(ValueError, match="cannot resume, it was started from a different source"):
        write_lmdb(NumberedImages(5), path, resume=True, num_workers=0, progress=False)


@pytest.fixture
def folder_with_bad_files(image_folder, tmp_path):
    root = tmp_path / "images"
    for path in image_folder.rglob("*.jpg"):
        target = root / path.relative_to(image_folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    good = (root / "class_00" / "img_00000.jpg").read_bytes()
    (root / "class_00" / "img_00001.jpg").write_bytes(good[: len(good) // 2])  # truncated
    (root / "class_01" / "img_00004.jpg").write_bytes(b"not an image at all")  # corrupt
    return root


def test_a_bad_file_stops_the_conversion_with_its_name(folder_with_bad_files, tmp_path):
    with pytest.raises(ImageDecodeError, match=r"class_00/img_00001.jpg.* \(item 1 of the source"):
        write_lmdb(folder_with_bad_files, tmp_path / "db", num_workers=0, progress=False)
    assert committed_records(tmp_path / "db") == 1  # the good record before it is kept


def test_skip_bad_counts_and_lists_the_skipped_files(folder_with_bad_files, tmp_path):
    meta = write_lmdb(
        folder_with_bad_files, tmp_path / "db", skip_bad=True, num_workers=2, progress=False
    )
    assert meta["count"] == 4
    skipped = [Path(entry["path"]).name for entry in meta["skipped"]]
    assert skipped == ["img_00001.jpg", "img_00004.jpg"]
    assert "truncated" in meta["skipped"][0]["error"] or "decode" in meta["skipped"][0]["error"]
    assert [LMDBDataset(tmp_path / "db")[i][1] for i in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"quality": 0}, ValueError, r"quality must be an int in \[1, 100\], got 0"),
        ({"quality": 101}, ValueError, r"quality must be an int in \[1, 100\], got 101"),
        ({"quality": float("nan")}, ValueError, r"quality must be an int in \[1, 100\], got nan"),
        ({"resize": 0}, ValueError, "resize must be an int >= 1, got 0"),
        ({"resize": float("nan")}, ValueError, "resize must be an int >= 1, got nan"),
        ({"resize": 1.5}, ValueError, "resize must be an int >= 1, got 1.5"),
        ({"commit_every": 0}, ValueError, "commit_every must be an int >= 1, got 0"),
        ({"num_workers": -1}, ValueError, "num_workers must be an int >= 0, got -1"),
        ({"num_workers": True}, ValueError, "num_workers must be an int >= 0, got True"),
        ({"map_size": 0}, ValueError, "map_size must be an int >= 4096, got 0"),
    ],
)
def test_bad_arguments(image_folder, tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        write_lmdb(image_folder, tmp_path / "db", progress=False, **kwargs)


def test_bad_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such image folder"):
        write_lmdb(tmp_path / "missing", tmp_path / "db", progress=False)
    with pytest.raises(TypeError, match="source must be an image folder, a list"):
        write_lmdb(42, tmp_path / "db", progress=False)


def test_the_metadata_is_the_last_record(database):
    with (
        lmdb.open(str(database), subdir=False, readonly=True, lock=False) as env,
        env.begin() as txn,
    ):
        keys = [key for key, _ in txn.cursor()]
    assert keys[-1] == META_KEY and len(keys) == 7


def test_a_bad_file_stops_the_workers_at_once_and_leaves_none_behind(
    folder_with_bad_files, tmp_path
):
    start = time.perf_counter()
    for attempt in range(3):  # it used to hang about one run in three
        with pytest.raises(ImageDecodeError, match=r"class_00/img_00001.jpg"):
            write_lmdb(
                folder_with_bad_files, tmp_path / f"db{attempt}", num_workers=2, progress=False
            )
        assert multiprocessing.active_children() == []
    assert time.perf_counter() - start < 60


def test_removing_the_bad_file_and_resuming_finishes_the_conversion(
    folder_with_bad_files, tmp_path
):
    path = tmp_path / "db"
    with pytest.raises(ImageDecodeError, match=r"remove the file, or pass skip_bad=True "
                       r"\(--skip-bad\), and run again with resume=True \(`fastload convert "
                       r"--resume`\)\)"):  # fmt: skip
        write_lmdb(folder_with_bad_files, path, num_workers=0, progress=False)
    (folder_with_bad_files / "class_00" / "img_00001.jpg").unlink()  # the advice, followed
    with pytest.raises(ImageDecodeError, match=r"class_01/img_00004.jpg"):
        write_lmdb(folder_with_bad_files, path, resume=True, num_workers=0, progress=False)
    (folder_with_bad_files / "class_01" / "img_00004.jpg").unlink()
    meta = write_lmdb(folder_with_bad_files, path, resume=True, num_workers=0, progress=False)
    assert meta["count"] == 4
    assert [LMDBDataset(path)[i][1] for i in range(4)] == [0, 0, 1, 1]


def test_resume_refuses_items_that_moved_before_the_point_reached(folder_with_bad_files, tmp_path):
    path = tmp_path / "db"
    with pytest.raises(ImageDecodeError):
        write_lmdb(folder_with_bad_files, path, num_workers=0, progress=False)
    (folder_with_bad_files / "class_00" / "img_00000.jpg").unlink()  # already converted
    with pytest.raises(ValueError, match="cannot resume, it was started from a different"):
        write_lmdb(folder_with_bad_files, path, resume=True, num_workers=0, progress=False)


def test_resuming_a_complete_database_from_another_source_is_refused(image_folder, tmp_path):
    path = tmp_path / "db"
    write_lmdb(image_folder, path, num_workers=0, progress=False)
    with pytest.raises(ValueError, match="already complete, converted from a different source"):
        write_lmdb(NumberedImages(5), path, resume=True, num_workers=0, progress=False)
    write_lmdb(image_folder, path, resume=True, num_workers=0, progress=False)
    assert not lock_path(path).exists()  # a finished resume leaves no lock file


def test_a_missing_destination_directory_is_named(image_folder, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no-such-dir: no such directory to write db"):
        write_lmdb(image_folder, tmp_path / "no-such-dir" / "db", num_workers=0, progress=False)


FULL_DISK = textwrap.dedent(
    """
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
    from fastload.tools.cli import main
    main(["convert", {source!r}, {path!r}, "--workers", "0"])
    """
)


def test_a_full_disk_is_one_line_and_exit_2(tmp_path):
    source = make_image_folder(tmp_path / "images", num_classes=2, images_per_class=12)
    path = tmp_path / "db"
    completed = subprocess.run(
        [sys.executable, "-c", FULL_DISK.format(source=str(source), path=str(path))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2
    last = completed.stderr.splitlines()[-1]  # above it: the progress bar
    assert last.startswith("fastload convert: error:") and "is the disk full?" in last
    assert "Traceback" not in completed.stderr
