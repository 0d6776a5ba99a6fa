"""A conversion worker that dies (SIGKILL, as the out-of-memory killer sends) ends the
conversion with an error naming the item it held, keeps the records before it, and
``--resume`` finishes the database. Each conversion runs in a child process with a
time limit: before the fix it waited forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import lmdb
from fastload import LMDBDataset, make_image_folder, write_lmdb
from fastload.lmdb import WorkerDiedError
from fastload.tools.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import KilledAt

TESTS = str(Path(__file__).parent)

WRITE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from conftest import KilledAt
    from fastload import write_lmdb
    try:
        write_lmdb(KilledAt(40, kill_at=13), {path!r}, num_workers=2, commit_every=4,
                   progress=False)
    except Exception as error:
        print(type(error).__name__, error)
    """
)

# The worker that decodes img_00003.jpg kills itself; everything else is the real CLI.
CLI = textwrap.dedent(
    """
    import os, signal, sys
    import fastload.records.sources as sources
    from fastload.tools.cli import main
    parent, decode = os.getpid(), sources.decode_image
    def killing_decode(data, *, source, **options):
        if source.endswith("img_00003.jpg") and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return decode(data, source=source, **options)
    sources.decode_image = killing_decode
    main(["convert", {source!r}, {path!r}, "--workers", "2"])
    """
)


def committed(path: Path) -> int:
    """Records committed in the unfinished database ``path``."""
    with lmdb.open(str(path), subdir=False, readonly=True, lock=False) as env:
        return env.stat()["entries"] - 1  # the conversion's progress


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_a_killed_worker_names_its_item_keeps_the_records_before_and_resume_finishes(tmp_path):
    path = tmp_path / "db"
    completed = run(WRITE.format(tests=TESTS, path=str(path)))
    assert completed.stdout.strip() == (
        "WorkerDiedError KilledAt[13]: the worker process converting it was killed by "
        "SIGKILL (as the out-of-memory killer does) (item 13 of the source; the 13 records "
        "before it are kept: run again with resume=True (`fastload convert --resume`), with "
        "fewer num_workers (--workers) if memory ran out)"
    )
    assert committed(path) == 13
    meta = write_lmdb(KilledAt(40, kill_at=-1), path, resume=True, num_workers=2, progress=False)
    assert meta["count"] == 40
    dataset = LMDBDataset(path, decode="tensor")
    assert [dataset[index][1] for index in range(40)] == list(range(40))


@pytest.mark.slow
def test_the_cli_ends_in_one_line_naming_the_file_and_resume_completes(tmp_path, capsys):
    source = make_image_folder(tmp_path / "images", num_classes=2, images_per_class=4)
    path = tmp_path / "db"
    completed = run(CLI.format(source=str(source), path=str(path)))
    assert completed.returncode == 2
    last = completed.stderr.splitlines()[-1]  # above it: the progress bar
    assert last == (
        f"fastload convert: error: {source}/class_00/img_00003.jpg: the worker process "
        "converting it was killed by SIGKILL (as the out-of-memory killer does) (item 3 of "
        "the source; the 3 records before it are kept: run again with resume=True (`fastload "
        "convert --resume`), with fewer num_workers (--workers) if memory ran out)"
    )
    assert "Traceback" not in completed.stderr and committed(path) == 3
    main(["convert", str(source), str(path), "--resume", "--workers", "2"])
    assert capsys.readouterr().out.strip() == f"{path}: 8 records"
    assert [LMDBDataset(path)[index][1] for index in range(8)] == [0] * 4 + [1] * 4


def test_worker_died_error_is_an_os_error_the_cli_prints_in_one_line():
    assert issubclass(WorkerDiedError, OSError)


class Lies(torch.utils.data.Dataset):
    """Says it has 6 items; item 3 raises IndexError (a bug, not bad input)."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int):
        if index == 3:
            raise IndexError("list index out of range")
        return torch.zeros(3, 4, 4, dtype=torch.uint8), index


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_the_dataset_is_raised_as_it_is_with_the_item_it_was_at(tmp_path, workers):
    with pytest.raises(IndexError, match="list index out of range") as caught:
        write_lmdb(Lies(), tmp_path / "db", num_workers=workers, progress=False)
    assert caught.value.__notes__ == ["(converting Lies[3], item 3 of the source)"]


THREADS_BEFORE_FORK = textwrap.dedent(
    """
    import torch
    from fastload import write_lmdb
    from fastload.testing.shapes import ShapesDetection
    torch.ones(512, 512).sum(0).tolist()  # PyTorch's (OpenMP) threads at work before the fork
    write_lmdb(ShapesDetection(8, size=(240, 320)), {path!r}, num_workers=2, progress=False)
    print("converted")
    """
)


@pytest.mark.slow
def test_workers_of_a_process_that_used_pytorchs_threads_do_not_deadlock(tmp_path):
    completed = run(THREADS_BEFORE_FORK.format(path=str(tmp_path / "db")))
    assert completed.stdout == "converted\n", completed.stderr[-2000:]
    assert len(LMDBDataset(tmp_path / "db")) == 8
