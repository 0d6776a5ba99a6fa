"""Hugging Face image sets converted to LMDB and shards: the encoded bytes kept as they
are, labels or COCO-style targets as from_hf gives them; ``fastload convert hf:PATH``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

datasets = pytest.importorskip("datasets")

from fastload import LMDBDataset, make_image_folder, write_lmdb  # noqa: E402
from fastload.datasets import from_hf  # noqa: E402
from fastload.shards import ShardedDataset, write_shards  # noqa: E402
from fastload.tools.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    folder = make_image_folder(
        tmp_path_factory.mktemp("hf"), num_classes=2, images_per_class=3, size=(64, 48)
    )
    return datasets.load_dataset("imagefolder", data_dir=str(folder), split="train")


@pytest.fixture(scope="module")
def saved(hf, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "set"
    datasets.DatasetDict({"train": hf, "test": hf.select([0, 5])}).save_to_disk(str(path))
    return path


def assert_same_bytes_and_labels(converted, hf) -> None:
    raw = from_hf(hf, decode=None)
    assert len(converted) == len(raw)
    for index in range(len(raw)):
        (ours, label), (theirs, want) = converted[index], raw[index]
        assert torch.equal(ours, theirs) and label == want


@pytest.mark.parametrize("writer", ["lmdb", "shards"])
def test_a_dataset_converts_with_its_bytes_as_they_are(hf, tmp_path, writer):
    if writer == "lmdb":
        write_lmdb(hf, tmp_path / "out.lmdb", num_workers=0, progress=False)
        converted = LMDBDataset(tmp_path / "out.lmdb", decode=None)
    else:
        write_shards(hf, tmp_path / "shards")
        converted = ShardedDataset(tmp_path / "shards", decode=None)
    assert_same_bytes_and_labels(converted, hf)
    assert converted.classes == ["class_00", "class_01"]


def test_objects_become_the_fields_of_a_coco_conversion(hf, tmp_path):
    objects = [{"bbox": [[1.0, 2.0, 10.0, 20.0]], "category": [1]}] * len(hf)
    detection = hf.remove_columns("label").add_column("objects", objects)
    source = from_hf(detection, label="objects", decode="tensor")
    write_lmdb(source, tmp_path / "det.lmdb", num_workers=0, progress=False)
    converted = LMDBDataset(tmp_path / "det.lmdb", decode="tensor")
    assert converted.fields == ["boxes", "labels"]
    (image, target), (want_image, want) = converted[4], source[4]
    assert torch.equal(image, want_image)
    assert target["boxes"].tolist() == want["boxes"].tolist() == [[1, 2, 11, 22]]
    assert target["boxes"].canvas_size == (48, 64) and target["labels"].tolist() == [1]


def test_fastload_convert_reads_a_saved_set(saved, hf, tmp_path, capsys):
    main(["convert", f"hf:{saved}", str(tmp_path / "a.lmdb"), "--hf-split", "train",
          "--workers", "0"])  # fmt: skip
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'a.lmdb'}: 6 records"
    assert_same_bytes_and_labels(LMDBDataset(tmp_path / "a.lmdb", decode=None), hf)
    main(["convert", f"hf:{saved}", str(tmp_path / "b"), "--hf-split", "test", "--shards",
          "--hf-label", "none"])  # fmt: skip
    shards = ShardedDataset(tmp_path / "b", decode=None)
    assert len(shards) == 2 and shards[1][1] is None
    assert torch.equal(shards[1][0], from_hf(hf, decode=None)[5][0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("hf:{saved} {out}", "{saved}: give one of its splits with --hf-split: ['test', 'train']"),
        ("hf:{saved} {out} --hf-split dev", "{saved}: no split 'dev'; give one of its splits"),
        ("hf:{saved} {out} --hf-split train --hf-label y", "label column 'y' is not in the "
         "dataset; its columns: 'image', 'label'"),
        ("{saved} {out} --hf-split train", "--hf-split reads a Hugging Face set: give SOURCE as "
         "hf:PATH"),
        ("hf:{missing} {out}", "Directory {missing} not found"),
    ],
)  # fmt: skip
def test_convert_errors_are_one_line_and_exit_2(saved, tmp_path, capsys, argv, message):
    where = {"saved": saved, "out": tmp_path / "x.lmdb", "missing": tmp_path / "missing"}
    with pytest.raises(SystemExit) as stopped:
        main(["convert", *argv.format(**where).split()])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("fastload convert: error: ") and message.format(**where) in err, err
    assert not (tmp_path / "x.lmdb").exists()


def test_without_datasets_the_error_says_how_to_install_it(saved, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now fails
    with pytest.raises(SystemExit):
        main(["convert", f"hf:{saved}", str(tmp_path / "x.lmdb")])
    err = capsys.readouterr().err
    assert "pip install '.[datasets]'" in err and "fastload[" not in err
