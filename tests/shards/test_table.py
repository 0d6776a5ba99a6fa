"""Member tables: a table round-trips any keys, extensions, offsets and sizes; a new set
(index version 4) ends each shard with its table, which tar readers never see; a table
(inside its shard, or beside it: version 3) changed, cut short, mis-hashed or pointing
outside its shard is refused naming the file; construction reads no table, and the
dataset pickles to bytes that grow with the shards; an index of version 2 reads,
upgrades with one command, and reads the same samples after."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.shard_index import write_synthetic
from fastload import ImageFolder, make_image_folder
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.shards.format.index import INDEX, Member, ShardIndexError, shards_digest, table_name
from fastload.shards.format.table import read_table, table_bytes
from fastload.tools.cli import main
from old_shard_index import to_version_2, to_version_3

SHARD = 1 << 40  # a shard size every drawn member fits in

extension = st.from_regex(r"\A\w{1,8}\Z", fullmatch=True)
span = st.tuples(st.integers(0, SHARD // 2), st.integers(0, SHARD // 2))
sample = st.tuples(st.text(max_size=20), st.dictionaries(extension, span, min_size=1, max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(sample, max_size=30))
def test_a_table_reads_back_what_was_written(drawn):
    samples = [(key, {ext: Member(ext, offset, size) for ext, (offset, size) in spans.items()})
               for key, spans in drawn]  # fmt: skip
    table = read_table(table_bytes(samples), "t.idx", shard_size=SHARD, count=len(samples))
    assert list(table.samples()) == samples


def test_a_table_that_is_not_one_is_refused_naming_it():
    samples = [("a", {"jpg": Member("jpg", 0, 10)}), ("b", {"jpg": Member("jpg", 10, 5)})]
    data = table_bytes(samples)
    with pytest.raises(ShardIndexError, match=r"^t\.idx: not a fastload member table"):
        read_table(b"PK" + data, "t.idx", shard_size=100, count=2)
    with pytest.raises(ShardIndexError, match=r"^t\.idx: cut short"):
        read_table(data[:40], "t.idx", shard_size=100, count=2)
    with pytest.raises(ShardIndexError, match=r"^t\.idx: 2 samples, the index says 3"):
        read_table(data, "t.idx", shard_size=100, count=3)
    with pytest.raises(ShardIndexError, match=r"^t\.idx: member 1 .* lies outside the shard's 12"):
        read_table(data, "t.idx", shard_size=12, count=2)
    version = bytearray(data)
    version[8] = 9
    with pytest.raises(ShardIndexError, match="member table version 9"):
        read_table(bytes(version), "t.idx", shard_size=100, count=2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=2, images_per_class=5, size=(32, 24)
    )


@pytest.fixture
def written(folder, tmp_path) -> Path:
    """A shard set as write_shards makes it (version 4)."""
    write_shards(folder, tmp_path / "shards", shard_size=10_000)
    return tmp_path / "shards"


@pytest.fixture
def shards(written) -> Path:
    """The same set with its member tables beside the shards (version 3)."""
    to_version_3(written)
    return written


def everything(dataset: ShardedDataset) -> list[tuple[bytes, int]]:
    return [(image.tobytes(), label) for image, label in (dataset[i] for i in range(len(dataset)))]


def test_a_shard_set_is_written_in_version_4_each_table_at_its_shards_end(written, folder):
    index = json.loads((written / INDEX).read_text())
    assert index["version"] == 4 and len(index["shards"]) > 2
    assert sorted(path.name for path in written.iterdir()) == sorted(
        [INDEX] + [entry["name"] for entry in index["shards"]])  # fmt: skip
    dataset = ShardedDataset(written)
    for number, entry in enumerate(index["shards"]):
        data = (written / entry["name"]).read_bytes()
        assert len(data) == entry["size"] and "samples" not in entry
        table = data[-entry["table_size"] :]
        assert hashlib.sha256(table).hexdigest() == entry["table_sha256"]
        assert table.startswith(b"FLTABLE\0")
        with tarfile.open(written / entry["name"]) as archive:  # a tar reader stops before it
            names = archive.getnames()
            assert names == [f"{key}.{ext}" for key, members in dataset.members(number).samples()
                             for ext in members]  # fmt: skip
            key, members = next(dataset.members(number).samples())
            extension, member = next(iter(members.items()))
            found = archive.extractfile(f"{key}.{extension}").read()
            assert found == data[member.offset : member.offset + member.size]
    assert sum(entry["count"] for entry in index["shards"]) == len(dataset) == 10
    reference = ImageFolder(folder)
    assert [label for _, label in everything(dataset)] == [reference[i][1] for i in range(10)]


def assert_refused(folder: Path, where: str, message: str, named: str, capsys) -> None:
    """The set's first read, its verify and ``fastload verify`` each refuse it with
    ``message`` naming ``where`` (the command's output names ``named``)."""
    dataset = ShardedDataset(folder)  # per-shard facts only: no table is read yet
    for refused in (lambda: dataset[0], dataset.verify):
        with pytest.raises(ShardIndexError, match=f"{re.escape(where)}: {message}"):
            refused()
    with pytest.raises(SystemExit) as stop:
        main(["verify", str(folder)])
    assert stop.value.code == 1 and named in capsys.readouterr().out


def test_a_table_inside_its_shard_changed_is_refused_naming_the_shard(written, capsys):
    first = ShardedDataset(written).shards[0].name
    change_bytes(written / first)  # the table's last byte: the shard's last
    where = f"{written / first} (its member table)"
    assert_refused(written, where, "its SHA-256 differs from the index's", first, capsys)


def test_a_shard_set_with_tables_beside_its_shards_reads_as_written(written, shards):
    expected = everything(ShardedDataset(written))
    index = json.loads((shards / INDEX).read_text())
    assert index["version"] == 3
    for entry in index["shards"]:
        assert (shards / table_name(entry["name"])).is_file()
    assert everything(ShardedDataset(shards)) == expected


def change_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def outside(path: Path) -> None:
    """A member moved past its shard's end, the table's facts in the index made to match
    (as a hostile writer would): only the contents check finds it."""
    data = bytearray(path.read_bytes())
    data[32:40] = (10**9).to_bytes(8, "little")  # the first member's offset
    path.write_bytes(bytes(data))
    index_path = path.parent / INDEX
    index = json.loads(index_path.read_text())
    import hashlib

    index["shards"][0]["table_sha256"] = hashlib.sha256(data).hexdigest()
    index["shards_sha256"] = shards_digest(index["shards"])
    index_path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (change_bytes, "its SHA-256 differs from the index's"),
        (cut_short, "its SHA-256 differs from the index's"),
        (outside, r"member 0 \(its sample's \w+\) at 1000000000 .* lies outside the shard's"),
    ],
)
def test_a_tampered_table_is_refused_naming_it(shards, tamper, message, capsys):
    first = ShardedDataset(shards).shards[0].name
    tamper(shards / table_name(first))
    where = str(shards / table_name(first))
    assert_refused(shards, where, message, table_name(first), capsys)


def test_a_wrong_hash_in_the_index_is_refused_naming_the_table(shards):
    index = json.loads((shards / INDEX).read_text())
    index["shards"][1]["table_sha256"] = "0" * 64
    index["shards_sha256"] = shards_digest(index["shards"])
    (shards / INDEX).write_text(json.dumps(index))
    dataset = ShardedDataset(shards)
    dataset[0]  # shard 0's table is intact
    name = table_name(dataset.shards[1].name)
    with pytest.raises(ShardIndexError, match=f"{re.escape(name)}: its SHA-256 differs"):
        dataset[dataset.shard_range(1)[0]]


def test_construction_reads_no_table_and_a_missing_one_is_named_on_first_read(shards):
    expected = everything(ShardedDataset(shards))
    tables = {path.name: path.read_bytes() for path in shards.glob("*.idx")}
    for name in tables:
        (shards / name).unlink()
    dataset = ShardedDataset(shards)  # constructs without any table
    assert len(dataset) == 10
    name = table_name(dataset.shards[0].name)
    with pytest.raises(ShardIndexError, match=f"{re.escape(str(shards / name))}: the member "
                       f"table of {re.escape(dataset.shards[0].name)} is missing"):  # fmt: skip
        dataset[0]
    for name, data in tables.items():
        (shards / name).write_bytes(data)
    assert everything(dataset) == expected


def test_a_member_table_that_is_a_folder_is_refused_naming_it(shards, capsys):
    first = ShardedDataset(shards).shards[0].name
    table = shards / table_name(first)
    table.unlink()
    table.mkdir()
    message = f"the member table of {re.escape(first)} is a folder, not a file"
    assert_refused(shards, str(table), message, table_name(first), capsys)


def test_the_dataset_pickles_to_bytes_that_grow_with_its_shards(tmp_path):
    write_synthetic(tmp_path / "new", samples=200 * 50, shards=200, layout=3)
    write_synthetic(tmp_path / "old", samples=200 * 50, shards=200, layout=2)
    new, old = ShardedDataset(tmp_path / "new"), ShardedDataset(tmp_path / "old")
    new.members(3)  # a table read and kept in this process: not pickled
    pickled = len(pickle.dumps(new))
    # name, size, two SHA-256s, count, extensions: under 400 bytes a shard; the members
    # inline (version 2) take about 3,900 a shard here, 75 bytes a sample
    assert pickled < 200 * 400 and pickled * 5 < len(pickle.dumps(old))
    again = pickle.loads(pickle.dumps(new))
    assert again.members(3).key(0) == new.members(3).key(0) == f"{3 * 50:09d}"


def test_a_version_2_index_reads_and_upgrades_to_the_same_samples(shards, capsys):
    expected = everything(ShardedDataset(shards))
    to_version_2(shards)  # the old layout, written by the old code path
    assert (
        not list(shards.glob("*.idx")) and json.loads((shards / INDEX).read_text())["version"] == 2
    )
    old = ShardedDataset(shards)
    assert everything(old) == expected
    state = ShardShuffle(old, global_batch_size=2, seed=1).order_identity()
    assert main(["index", "--upgrade", str(shards)]) in (None, 0)
    assert "version 3" in capsys.readouterr().out
    upgraded = ShardedDataset(shards)
    assert upgraded.meta["version"] == 3 and len(list(shards.glob("*.idx"))) == len(old.shards)
    assert everything(upgraded) == expected
    upgraded.verify()
    # a state saved on the old index still names this set
    assert ShardShuffle(upgraded, global_batch_size=2, seed=1).order_identity() == state
    with pytest.raises(SystemExit) as stop:
        main(["index", "--upgrade", str(shards)])
    assert stop.value.code == 2
    assert re.fullmatch(r"fastload index: error: .*nothing to upgrade\n", capsys.readouterr().err)


def test_an_upgrade_never_replaces_a_file_it_did_not_make(shards, capsys):
    to_version_2(shards)
    before = (shards / INDEX).read_bytes()
    first = ShardedDataset(shards).shards[0].name
    (shards / table_name(first)).write_bytes(b"mine")
    with pytest.raises(SystemExit) as stop:
        main(["index", "--upgrade", str(shards)])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1 and "is left as it is" in error
    assert (shards / table_name(first)).read_bytes() == b"mine"
    assert (shards / INDEX).read_bytes() == before and len(list(shards.glob("*.idx"))) == 1


@pytest.mark.parametrize("upgrade", [True, False])
def test_an_index_run_again_clears_what_a_killed_one_left_and_nothing_else(shards, upgrade):
    if upgrade:
        to_version_2(shards)
    else:
        for path in [*shards.glob("*.idx"), shards / INDEX]:
            path.unlink()
    first = sorted(shards.glob("*.tar"))[0].name
    # what write_whole's temporary files are named, as a kill leaves them
    left = [shards / ".index.json.k3j_9x2a.tmp", shards / f".{table_name(first)}.abcdefgh.tmp"]
    mine = [
        shards / name
        for name in (
            ".index.json.mine.tmp",
            ".notes.abcdefgh.tmp",
            "index.json.abcdefgh.tmp",
            ".index.json.abcdefghi.tmp",
        )
    ]
    for path in [*left, *mine]:
        path.write_bytes(b"kept?")
    main(["index", *(["--upgrade"] if upgrade else []), str(shards)])
    assert not any(path.exists() for path in left)
    assert all(path.read_bytes() == b"kept?" for path in mine)
    assert json.loads((shards / INDEX).read_text())["version"] == 3


def test_fastload_index_writes_tables_beside_webdataset_shards(shards):
    expected = everything(ShardedDataset(shards))
    for path in [*shards.glob("*.idx"), shards / INDEX]:
        path.unlink()
    main(["index", str(shards)])
    assert json.loads((shards / INDEX).read_text())["version"] == 3
    dataset = ShardedDataset(shards)
    assert len(list(shards.glob("*.idx"))) == len(dataset.shards)
    assert [label for _, label in everything(dataset)] == [label for _, label in expected]
    assert np.array_equal(np.frombuffer(everything(dataset)[0][0], np.uint8),
                          np.frombuffer(expected[0][0], np.uint8))  # fmt: skip


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_fastload_index_writes_files_as_readable_as_the_shards(shards, umask):
    for path in [*shards.glob("*.idx"), shards / INDEX]:
        path.unlink()
    before = os.umask(umask)
    try:
        main(["index", str(shards)])
    finally:
        os.umask(before)
    written = [shards / INDEX, *shards.glob("*.idx")]
    assert len(written) > 1
    assert [oct(path.stat().st_mode & 0o777) for path in written] == [oct(0o666 & ~umask)] * len(
        written
    )
