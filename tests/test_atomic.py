"""Files written whole or not at all, with the permissions of any new file."""

from __future__ import annotations

import os

import pytest

from fastload._atomic import replacing, temporary_names, write_whole


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_a_file_written_whole_gets_the_permissions_the_umask_gives(tmp_path, umask):
    path = tmp_path / "index.json"
    before = os.umask(umask)
    try:
        write_whole(path, b"first")
        write_whole(path, b"second")  # replacing one
        beside = tmp_path / "beside.json"
        beside.write_bytes(b"made as any file is")
    finally:
        os.umask(before)
    assert path.read_bytes() == b"second"
    assert oct(path.stat().st_mode & 0o777) == oct(beside.stat().st_mode & 0o777)
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~umask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beside.json", "index.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "index.json"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="stopped"), replacing(path) as file:
        file.write(b"half of the new")
        raise RuntimeError("stopped")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_the_temporary_files_are_named_as_their_cleaners_find_them(tmp_path):
    path = tmp_path / "shard-0.tar.idx"
    with replacing(path) as file:
        (temporary,) = [p for p in tmp_path.iterdir() if p.name != path.name]
        file.write(b"table")
    own = temporary_names(r".+\.idx")
    assert own.fullmatch(temporary.name)
    assert not own.fullmatch(".shard-0.tar.idx.mine.tmp")
    assert not own.fullmatch(".notes.abcdefgh.tmp")
