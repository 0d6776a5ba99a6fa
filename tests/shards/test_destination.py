"""Where a conversion writes: a file of the user's is never replaced (a folder of their
own WebDataset shards named as fastload names them is refused by name, before any
work), a resume of fastload's own conversion still goes on, and a destination that
is a file, or an empty source, is said in one line naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastload import make_image_folder
from fastload.decode.opencv import ImageDecodeError
from fastload.shards import ShardedDataset, write_shards
from fastload.shards.format.index import PROGRESS, ShardIndexError
from fastload.shards.format.scan import index_webdataset
from fastload.tools.cli import main


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    """The process's umask set to the parameter for the test."""
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


@pytest.fixture
def folder(tmp_path) -> Path:
    return make_image_folder(tmp_path / "images", num_classes=2, images_per_class=4, size=(64, 48))


def interrupted(folder: Path, shards: Path) -> None:
    """A conversion of ``folder`` into ``shards`` stopped at a bad image in its second
    class, its first shards written and its progress saved."""
    broken = sorted((folder / "class_01").iterdir())[0]
    original = broken.read_bytes()
    broken.write_bytes(b"not an image")
    try:
        with pytest.raises(ImageDecodeError):
            write_shards(folder, shards, shard_size=3_000)
    finally:
        broken.write_bytes(original)
    assert (shards / PROGRESS).exists() and list(shards.glob("shard-*.tar"))


@pytest.mark.parametrize("name", ["shard-000000.tar", "shard-000003.tar", "shard-00001-0000.tar"])
def test_a_folder_of_the_users_shards_under_fastloads_names_is_refused_untouched(
    folder, tmp_path, name
):
    mine = tmp_path / "mine"
    mine.mkdir()
    for other in (name, "shard-000001.tar", "notes.txt"):
        (mine / other).write_bytes(b"the user's own " + other.encode())
    before = {path.name: path.read_bytes() for path in mine.iterdir()}
    first = min(n for n in before if n.startswith("shard-"))
    with pytest.raises(FileExistsError, match=rf"^{mine}/{first} and 1 more: a file a new "):
        write_shards(folder, mine)
    assert {path.name: path.read_bytes() for path in mine.iterdir()} == before  # no progress


def test_the_command_line_refuses_them_in_one_line_with_exit_2(folder, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "shard-000000.tar").write_bytes(b"mine")
    with pytest.raises(SystemExit) as stop:
        main(["convert", str(folder), str(mine), "--shards"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert error.startswith(f"fastload convert: error: {mine}/shard-000000.tar: a file a new")
    assert os.listdir(mine) == ["shard-000000.tar"]
    assert (mine / "shard-000000.tar").read_bytes() == b"mine"


def test_files_under_other_names_are_left_beside_the_new_set(folder, tmp_path):
    beside = tmp_path / "beside"
    beside.mkdir()
    mine = {"train-000000.tar": b"a tar of mine", "shard-0.tar": b"mine too", "a.txt": b"x"}
    for name, data in mine.items():
        (beside / name).write_bytes(data)
    meta = write_shards(folder, beside, shard_size=3_000)
    assert meta["samples"] == len(ShardedDataset(beside)) == 8
    assert {name: (beside / name).read_bytes() for name in mine} == mine


def test_a_resume_finishes_a_conversion_whose_last_shard_was_put_but_not_recorded(folder, tmp_path):
    interrupted(folder, tmp_path / "s")
    records = sorted((tmp_path / "s").glob(f"{PROGRESS}.shard-*"))
    assert records
    records[-1].unlink()  # killed between putting its shard and recording it
    write_shards(folder, tmp_path / "s", shard_size=3_000, resume=True)
    write_shards(folder, tmp_path / "whole", shard_size=3_000)
    resumed, whole = ShardedDataset(tmp_path / "s"), ShardedDataset(tmp_path / "whole")
    assert [shard.sha256 for shard in resumed.shards] == [shard.sha256 for shard in whole.shards]
    assert sorted(os.listdir(tmp_path / "s")) == sorted(os.listdir(tmp_path / "whole"))


def test_a_resume_clears_only_the_writers_own_half_written_files(folder, tmp_path):
    interrupted(folder, tmp_path / "s")
    ours = tmp_path / "s" / ".shard-000009.tar.0123456789ab.tmp"
    ours.write_bytes(b"half a shard")
    mine = [tmp_path / "s" / name for name in (".notes.tar.backup.tmp", ".shard-x.tar.1.tmp")]
    for path in mine:
        path.write_bytes(b"mine")
    write_shards(folder, tmp_path / "s", shard_size=3_000, resume=True)
    assert not ours.exists() and all(path.read_bytes() == b"mine" for path in mine)


def test_a_destination_that_is_a_file_is_refused_naming_it(folder, tmp_path, capsys):
    file = tmp_path / "file"
    file.write_bytes(b"mine")
    with pytest.raises(FileExistsError, match=f"^{file}: a file is there; shards are written "):
        write_shards(folder, file)
    with pytest.raises(NotADirectoryError, match=f"^{file}/sub: cannot make the folder"):
        write_shards(folder, file / "sub")
    with pytest.raises(SystemExit) as stop:
        main(["convert", str(folder), str(file), "--shards"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert error.startswith(f"fastload convert: error: {file}: a file is there")
    assert file.read_bytes() == b"mine"


def test_an_empty_source_is_refused_naming_it_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"^list of 0 files: no images, nothing to convert$"):
        write_shards([], tmp_path / "s")
    assert not (tmp_path / "s").exists()  # the folder it made goes with it


def test_an_unfinished_conversion_is_not_indexed_and_still_resumes(folder, tmp_path, capsys):
    interrupted(folder, tmp_path / "s")
    before = sorted(os.listdir(tmp_path / "s"))
    with pytest.raises(SystemExit) as stop:
        main(["index", str(tmp_path / "s")])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert error.startswith(f"fastload index: error: {tmp_path / 's'}: holds an unfinished "
                            f"fastload conversion ({PROGRESS}): finish it with `fastload "
                            "convert ... --resume`")  # fmt: skip
    with pytest.raises(ShardIndexError, match="holds an unfinished fastload conversion"):
        index_webdataset(tmp_path / "s")
    assert sorted(os.listdir(tmp_path / "s")) == before
    meta = write_shards(folder, tmp_path / "s", shard_size=3_000, resume=True)
    assert meta["samples"] == len(ShardedDataset(tmp_path / "s")) == 8


def test_every_file_of_a_shard_set_gets_the_permissions_of_a_new_file(folder, tmp_path, umask):
    write_shards(folder, tmp_path / "s", shard_size=3_000)
    # index.json as readable as the shards (a web server or another account serves them)
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in (tmp_path / "s").iterdir()}
    assert "index.json" in modes and len(modes) > 2
    assert modes == dict.fromkeys(modes, oct(0o666 & ~umask))


def convert_again(folder: Path, shards: Path) -> None:
    """``fastload convert --resume`` of ``folder`` into ``shards``, refused: exit status 2."""
    with pytest.raises(SystemExit) as stop:
        main(["convert", str(folder), str(shards), "--shards", "--shard-size", "3000", "--resume"])
    assert stop.value.code == 2


@pytest.mark.parametrize("left", [b"", b'{"description": "folder of', b"[]"])
def test_a_damaged_progress_record_is_named_with_what_to_do(folder, tmp_path, capsys, left):
    shards = tmp_path / "s"
    interrupted(folder, shards)
    (shards / PROGRESS).write_bytes(left)  # a power cut after a rename not yet on the disk
    before = sorted(os.listdir(shards))
    advice = (
        f"{shards / PROGRESS}: the progress record of an unfinished conversion is empty or "
        "damaged (a crash or power cut while it was written): the conversion cannot be "
        f"resumed; remove its files from {shards} (shard-*.tar, {PROGRESS}*) and convert again"
    )
    convert_again(folder, shards)
    assert capsys.readouterr().err == f"fastload convert: error: {advice}\n"
    with pytest.raises(ValueError) as refused:
        write_shards(folder, shards, shard_size=3_000, resume=True)
    assert str(refused.value) == advice
    assert sorted(os.listdir(shards)) == before  # nothing removed or written


def test_a_damaged_record_of_the_last_shard_is_named_and_a_resume_after_its_removal_finishes(
    folder, tmp_path, capsys
):
    shards = tmp_path / "s"
    interrupted(folder, shards)
    records = sorted(shards.glob(f"{PROGRESS}.shard-*"))
    assert len(records) >= 2
    records[-1].write_bytes(b"")
    convert_again(folder, shards)
    assert capsys.readouterr().err == (
        f"fastload convert: error: {records[-1]}: the progress record of a finished shard is "
        "empty or damaged (a crash or power cut while it was written): remove it and resume "
        "with resume=True (`fastload convert --resume`): that shard is converted again\n"
    )
    records[-1].unlink()  # as it says
    write_shards(folder, shards, shard_size=3_000, resume=True)
    write_shards(folder, tmp_path / "whole", shard_size=3_000)
    resumed, whole = ShardedDataset(shards), ShardedDataset(tmp_path / "whole")
    assert [shard.sha256 for shard in resumed.shards] == [shard.sha256 for shard in whole.shards]


def test_a_damaged_record_of_an_earlier_shard_says_to_convert_again(folder, tmp_path, capsys):
    shards = tmp_path / "s"
    interrupted(folder, shards)
    records = sorted(shards.glob(f"{PROGRESS}.shard-*"))
    records[0].write_bytes(b'{"entry": {"na')
    convert_again(folder, shards)
    assert capsys.readouterr().err == (
        f"fastload convert: error: {records[0]}: the progress record of a finished shard is "
        "empty or damaged (a crash or power cut while it was written): the conversion cannot "
        f"be resumed; remove its files from {shards} (shard-*.tar, {PROGRESS}*) and convert "
        "again\n"
    )
