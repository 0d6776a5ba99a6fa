from __future__ import annotations

import json

import pytest

import lmdb
from fastload.records.format import index_key, pack_record
from fastload.tools.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_convert_info_verify(image_folder, tmp_path, capsys):
    db = tmp_path / "train.lmdb"
    code, out, _ = run(capsys, "convert", str(image_folder), str(db), "--workers", "0")
    assert code == 0 and out.strip() == f"{db}: 6 records"
    code, out, _ = run(capsys, "info", str(db))
    info = json.loads(out)
    assert code == 0 and info["count"] == 6 and info["classes"] == ["class_00", "class_01"]
    assert info["file_bytes"] == db.stat().st_size
    code, out, _ = run(capsys, "verify", str(db))
    assert code == 0 and out.strip().endswith("6 of 6 records verified")


def test_convert_refuses_an_existing_destination_in_one_line(database, capsys):
    code, _, err = run(capsys, "convert", str(database.parent), str(database))
    assert code == 2
    assert err.startswith("fastload convert: error: ") and "exists; pass resume=True" in err
    assert "(`fastload convert --resume`) to finish" in err  # the flag a CLI user passes
    assert "Traceback" not in err


def test_verify_finds_a_corrupt_record(image_folder, tmp_path, capsys):
    db = tmp_path / "train.lmdb"
    run(capsys, "convert", str(image_folder), str(db), "--workers", "0")
    value = bytearray(pack_record((image_folder / "class_00" / "img_00000.jpg").read_bytes(), 0))
    value[-10] ^= 0xFF  # a damaged payload byte, as a bad disk or copy leaves
    with lmdb.open(str(db), subdir=False) as env, env.begin(write=True) as txn:
        txn.put(index_key(2), bytes(value))
    code, out, _ = run(capsys, "verify", str(db))
    assert code == 1
    assert "train.lmdb:0000000002: CRC-32 mismatch, the record is corrupt" in out
    assert out.strip().endswith("5 of 6 records verified")


@pytest.mark.parametrize("command", ["info", "verify"])
def test_info_and_verify_on_a_missing_database(tmp_path, capsys, command):
    code, _, err = run(capsys, command, str(tmp_path / "nope.lmdb"))
    assert code == 2 and "nope.lmdb: no such fastload database" in err
