"""Shard sets: what is written reads back as the LMDB file of the same source; a killed
conversion resumes without redoing finished shards; a hostile index or shard is refused
naming the file; the order does not depend on the world size."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from common_utils import KILLED_CONVERSION
from fastload import FastLoader, ImageFolder, LMDBDataset, make_image_folder, write_lmdb
from fastload.decode.opencv import ImageDecodeError
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.shards.format.index import INDEX, PROGRESS, ShardIndexError, shards_digest
from fastload.shards.stores.node_cache import NodeCache
from fastload.testing.shapes import ShapesDetection
from old_shard_index import to_version_2


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=3, images_per_class=6, size=(64, 48)
    )


@pytest.fixture
def shards(folder, tmp_path) -> Path:
    write_shards(folder, tmp_path / "shards", shard_size=30_000)
    return tmp_path / "shards"


@pytest.fixture
def old_shards(shards) -> Path:
    """The same shard set with an index of version 2: members inline."""
    to_version_2(shards)
    return shards


def test_an_image_folder_reads_back_as_imagefolder_does(folder, shards):
    dataset, reference = ShardedDataset(shards), ImageFolder(folder)
    assert len(dataset) == len(reference) == 18 and dataset.classes == reference.classes
    assert len(dataset.shards) > 2  # 30 kB shards: several
    for index in range(len(dataset)):
        image, label = dataset[index]
        expected_image, expected_label = reference[index]
        assert label == expected_label and np.array_equal(image, expected_image)


def test_shards_hold_about_shard_size_bytes_each(shards):
    sizes = [
        (shards / name).stat().st_size
        for name in sorted(os.listdir(shards))
        if name.endswith(".tar")
    ]
    assert all(size < 30_000 + 20_000 for size in sizes[:-1])  # one sample past the mark at most


def test_detection_targets_read_back_as_from_lmdb(tmp_path):
    source = ShapesDetection(6, size=(48, 64))
    write_shards(source, tmp_path / "shards")
    write_lmdb(source, tmp_path / "same.lmdb", num_workers=0, progress=False)
    sharded = ShardedDataset(tmp_path / "shards", decode="tensor")
    lmdb = LMDBDataset(tmp_path / "same.lmdb", decode="tensor")
    for index in range(len(source)):
        (image, target), (expected_image, expected) = sharded[index], lmdb[index]
        assert torch.equal(image, expected_image) and target.keys() == expected.keys()
        for key in target:
            assert torch.equal(target[key], expected[key]), key
            assert type(target[key]) is type(expected[key]), key


def test_a_destination_with_a_shard_set_is_refused(shards, folder):
    with pytest.raises(FileExistsError, match="already holds a shard set"):
        write_shards(folder, shards)


def kill_a_conversion(folder: Path, shards: Path) -> None:
    """Convert ``folder`` into ``shards`` in a process killed (SIGKILL) after some shards."""
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERSION, str(folder), str(shards)],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -9


def test_a_killed_conversion_resumes_without_rewriting_finished_shards(folder, tmp_path):
    kill_a_conversion(folder, tmp_path / "shards")
    written = {name: (tmp_path / "shards" / name).stat().st_mtime_ns
               for name in os.listdir(tmp_path / "shards") if name.endswith(".tar")}  # fmt: skip
    assert written and not (tmp_path / "shards" / INDEX).exists()
    assert (tmp_path / "shards" / PROGRESS).exists()
    with pytest.raises(ShardIndexError, match="conversion did not finish"):
        ShardedDataset(tmp_path / "shards")
    with pytest.raises(FileExistsError, match=r"pass resume=True \(`fastload convert "
                       r"--resume`\) to finish it"):  # fmt: skip
        write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "shards")
    # a record cut short by the kill, as a power cut would leave it: not read, and removed
    half = tmp_path / "shards" / f"{PROGRESS}.shard-000099.tmp"
    half.write_text('{"entry": {"name"')
    write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "shards", shard_size=20_000,
                 resume=True)  # fmt: skip
    for name, modified in written.items():  # finished shards were kept as they were
        assert (tmp_path / "shards" / name).stat().st_mtime_ns == modified
    write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "whole", shard_size=20_000)
    resumed, whole = ShardedDataset(tmp_path / "shards"), ShardedDataset(tmp_path / "whole")
    assert [shard.sha256 for shard in resumed.shards] == [shard.sha256 for shard in whole.shards]
    assert sorted(os.listdir(tmp_path / "shards")) == sorted(os.listdir(tmp_path / "whole"))


def test_a_conversion_begun_by_a_fastload_of_another_index_version_is_not_resumed(folder, tmp_path):
    kill_a_conversion(folder, tmp_path / "shards")
    progress = tmp_path / "shards" / PROGRESS
    saved = json.loads(progress.read_text())
    assert saved["index_version"] == 4
    del saved["index_version"]  # as a fastload writing index version 3 saved it
    progress.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"differs from this one: index_version None, now 4$"):
        write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "shards",
                     shard_size=20_000, resume=True)  # fmt: skip
    assert not (tmp_path / "shards" / INDEX).exists()  # its shards hold no tables: no index


def rewrite_index(shards: Path, change, *, digest: bool = True) -> None:
    """Change the index as a hostile writer would: its digest made to match (``digest``)."""
    index = json.loads((shards / INDEX).read_text())
    change(index)
    if digest:
        index["shards_sha256"] = shards_digest(index["shards"])
    (shards / INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda i: i["shards"][0].update(name="../../etc/passwd"), "is not a file name beside"),
        (lambda i: i["shards"][0]["samples"][0][1].update(jpg=[10**9, 10]), "lies outside"),
        (lambda i: i["shards"][0]["samples"][0][1].update(jpg=[0, -1]), "lies outside"),
        (lambda i: i["shards"][0]["samples"].append("x"), "not \\[key, members\\]"),
        (lambda i: i.update(version=99), "index version 99"),
        (lambda i: i.update(format="webdataset"), "not a fastload shard index"),
        (lambda i: i["shards"][0].update(sha256=""), "sha256 '' is not a SHA-256 in hex"),
        (lambda i: i["shards"][0].update(sha256=None), "sha256 None is not a SHA-256"),
    ],
)
def test_an_index_that_lies_is_refused_naming_it(old_shards, change, message):
    shards = old_shards
    rewrite_index(shards, change)
    with pytest.raises(ShardIndexError, match=message):
        ShardedDataset(shards)


@pytest.mark.parametrize("version", [True, False, 0, -1, 5, 2.0, "4", None])
def test_an_index_version_this_fastload_does_not_read_is_refused_naming_it(shards, version):
    rewrite_index(shards, lambda index: index.update(version=version))
    where = re.escape(str(shards / INDEX))
    message = rf"^{where}: index version {re.escape(repr(version))} \(its version field\): "
    with pytest.raises(ShardIndexError, match=message + "this fastload reads versions 1 to 4$"):
        ShardedDataset(shards)


def test_a_shard_cut_short_or_missing_fails_verify_with_exit_1_naming_it(shards, capsys):
    from fastload.tools.cli import main

    first, second = sorted(shards.glob("shard-*.tar"))[:2]
    data = first.read_bytes()
    first.write_bytes(data[: len(data) // 2])
    with pytest.raises(SystemExit) as stop:
        main(["verify", str(shards)])
    found = f"shard 0: {first} has {len(data) // 2} bytes, the index says {len(data)}"
    assert stop.value.code == 1 and found in capsys.readouterr().out
    first.write_bytes(data)
    second.unlink()
    with pytest.raises(SystemExit) as stop:
        main(["verify", str(shards)])
    assert stop.value.code == 1 and f"shard 1: {second} is missing" in capsys.readouterr().out


@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
def test_a_cache_limit_that_is_not_a_positive_int_is_refused_naming_it(shards, tmp_path, limit):
    message = rf"^cache_limit must be an int >= 1, got {re.escape(repr(limit))}$"
    with pytest.raises(ValueError, match=message):
        ShardedDataset(shards, cache_dir=tmp_path, cache_limit=limit)
    with pytest.raises(ValueError, match=message):  # every source in object storage
        NodeCache(tmp_path, "s3://bucket/set", limit)


def test_a_cache_dir_that_is_a_file_is_refused_naming_it(shards, tmp_path):
    file = tmp_path / "file"
    file.write_bytes(b"mine")
    for given in (file, file / "sub"):
        message = f"^cache_dir {re.escape(repr(str(given)))}: {file} is a file, not a folder$"
        with pytest.raises(NotADirectoryError, match=message):
            ShardedDataset(shards, cache_dir=given)
        with pytest.raises(NotADirectoryError, match=message):
            NodeCache(given, "s3://bucket/set", None)
    assert file.read_bytes() == b"mine"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, r"not an index \(nested too deeply to read\)"),
        (b'{"format": "fastload-shards", "version": ' + b"9" * 5000 + b"}", "not JSON"),
        (b"\xff\xfe not text", "not JSON"),
    ],
)
def test_an_index_that_is_not_one_is_refused_naming_the_file(shards, content, message):
    (shards / INDEX).write_bytes(content)
    with pytest.raises(ShardIndexError, match=f"{re.escape(str(shards / INDEX))}: {message}"):
        ShardedDataset(shards)


def test_an_index_edited_after_it_was_written_is_refused_by_its_digest(shards):
    rewrite_index(shards, lambda index: index["shards"][0].update(count=1), digest=False)
    with pytest.raises(ShardIndexError, match="shards_sha256 does not match its shard list"):
        ShardedDataset(shards)


def overlapping(index):  # sample 1 made to read sample 0's bytes
    samples = index["shards"][0]["samples"]
    samples[1][1]["jpg"] = samples[0][1]["jpg"]


def listed_twice(index):
    index["shards"].append(index["shards"][0])


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        (overlapping, r"shard-\d+\.tar: members \S+\.jpg and \S+\.jpg overlap"),
        (listed_twice, r"shard \S+\.tar is listed 2 times in the index"),
    ],
)
def test_verify_finds_what_an_index_with_a_matching_digest_hides(
    old_shards, change, finding, capsys
):
    from fastload.tools.cli import main

    shards = old_shards
    rewrite_index(shards, change)  # its digest made to match, as a hostile writer would
    with pytest.raises(ShardIndexError, match=finding):
        ShardedDataset(shards).verify()
    with pytest.raises(SystemExit) as stop:
        main(["verify", str(shards)])
    assert stop.value.code == 1 and re.search(finding, capsys.readouterr().out)


def test_a_cls_member_that_is_not_an_integer_is_named_and_fails_verify(folder, tmp_path, capsys):
    import io
    import tarfile

    from fastload.tools.cli import main

    image = next(folder.rglob("*.jpg")).read_bytes()
    with tarfile.open(tmp_path / "train-0.tar", "w") as archive:
        for name, data in (("000.jpg", image), ("000.cls", b"cat")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    message = r"train-0\.tar:000: its cls member b'cat' is not what \.cls holds"
    with pytest.raises(ShardIndexError, match=message):
        ShardedDataset(tmp_path)[0]
    with pytest.raises(SystemExit) as stop:
        main(["verify", str(tmp_path)])
    assert stop.value.code == 1 and re.search(message, capsys.readouterr().out)


def test_a_version_1_index_without_a_digest_is_still_read(shards):
    expected = ShardedDataset(shards)[3]
    to_version_2(shards)

    def version_1(index):
        index["version"] = 1
        del index["shards_sha256"]

    rewrite_index(shards, version_1, digest=False)
    image, label = ShardedDataset(shards)[3]
    assert label == expected[1] and np.array_equal(image, expected[0])


def test_a_shard_cut_short_or_missing_is_refused_naming_it(shards):
    first = ShardedDataset(shards).shards[0]
    with open(shards / first.name, "r+b") as file:
        file.truncate(first.size - 100)
    with pytest.raises(
        ShardIndexError,
        match=f"{first.name} has {first.size - 100} bytes, the index says {first.size}",
    ):
        ShardedDataset(shards)
    (shards / first.name).unlink()
    with pytest.raises(ShardIndexError, match=f"{first.name} is missing"):
        ShardedDataset(shards)


def test_a_missing_index_or_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such shard folder"):
        ShardedDataset(tmp_path / "absent")
    with pytest.raises(ShardIndexError, match=r"no index\.json"):
        ShardedDataset(tmp_path)


def test_tampered_bytes_fail_verify_and_a_bad_member_names_its_shard(shards):
    dataset = ShardedDataset(shards)
    shard = dataset.shards[0]
    key, members = dataset.members(0).key(0), dataset.members(0).members(0)
    with open(shards / shard.name, "r+b") as file:  # the first image's bytes overwritten
        file.seek(members["jpg"].offset)
        file.write(b"\x00" * members["jpg"].size)
    with pytest.raises(ShardIndexError, match=f"{shard.name}: its SHA-256 differs"):
        dataset.verify()
    with pytest.raises(ImageDecodeError, match=f"{shard.name}:{key}"):
        dataset[0]


@pytest.mark.parametrize("window", [1, 2, 100])
def test_the_global_batches_are_the_same_for_any_world_size(shards, window):
    dataset = ShardedDataset(shards)

    def global_batches(world: int, epoch: int) -> list[list[int]]:
        per_rank = []
        for rank in range(world):
            sampler = ShardShuffle(dataset, global_batch_size=6, seed=3, window=window,
                                   rank=rank, world_size=world)  # fmt: skip
            sampler.set_epoch(epoch)
            indices = list(sampler)
            per_rank.append(
                [indices[i : i + 6 // world] for i in range(0, len(indices), 6 // world)]
            )
        return [list(itertools.chain(*parts)) for parts in zip(*per_rank, strict=True)]

    for epoch in range(2):
        one = global_batches(1, epoch)
        assert one == global_batches(2, epoch) == global_batches(3, epoch)
        flat = list(itertools.chain(*one))
        assert len(flat) == 18 and sorted(flat) == list(range(18))  # each sample once
    assert global_batches(1, 0) != global_batches(1, 1)


def test_a_window_keeps_each_rank_within_a_few_shards(shards):
    dataset = ShardedDataset(shards)
    order = ShardShuffle(dataset, global_batch_size=6, window=1).global_order()
    shard_sequence = [dataset.shard_of(index) for index in order]
    changes = sum(a != b for a, b in itertools.pairwise(shard_sequence))
    assert changes == len(dataset.shards) - 1  # one shard at a time, each read through once


def test_refusals_name_the_argument(shards):
    dataset = ShardedDataset(shards)
    with pytest.raises(ValueError, match="not a multiple of the world size 4"):
        ShardShuffle(dataset, global_batch_size=6, world_size=4, rank=0)
    with pytest.raises(ValueError, match="rank 2 is outside a world of 2"):
        ShardShuffle(dataset, global_batch_size=6, world_size=2, rank=2)


def test_fastloader_reads_it_in_workers(shards):
    dataset = ShardedDataset(shards, decode="tensor")
    sampler = ShardShuffle(dataset, global_batch_size=6, seed=1)
    loader = FastLoader(dataset, batch_size=6, sampler=sampler, num_workers=2)
    labels = torch.cat([batch[1] for batch in loader])
    expected = [dataset[index][1] for index in sampler]
    assert labels.tolist() == expected


class Noisy(ShardedDataset):
    """Each sample with a random draw from torch's generator (seeded by FastLoader's
    ``seed=`` per sample): its augmentation, as a number."""

    def __getitem__(self, index):
        _, label = super().__getitem__(index)
        return index, label, torch.rand(())


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    """72 samples in 18 shards: 6 global batches of 12 an epoch."""
    images = make_image_folder(
        tmp_path_factory.mktemp("many"), num_classes=3, images_per_class=24, size=(32, 24)
    )
    folder = tmp_path_factory.mktemp("many-shards")
    write_shards(images, folder, shard_size=12_000)
    return folder


def world(shards: Path, size: int, state=None):
    """One FastLoader per rank of a world of ``size``, each resumed from ``state``."""
    loaders = []
    for rank in range(size):
        dataset = Noisy(shards)
        sampler = ShardShuffle(dataset, global_batch_size=12, seed=5, window=2, rank=rank,
                               world_size=size)  # fmt: skip
        loader = FastLoader(dataset, batch_size=12 // size, sampler=sampler, seed=9,
                            num_workers=0)  # fmt: skip
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(loader)
    return loaders


def take(iterators, count: int | None = None) -> list[list[tuple[int, float]]]:
    """The next ``count`` global batches (all, without a count): the ranks' slices side
    by side, each sample as (index, its random draw)."""
    batches = []
    for parts in zip(*iterators, strict=True):
        batches.append(
            [(int(i), float(x)) for part in parts for i, x in zip(part[0], part[2], strict=True)]
        )
        if len(batches) == count:
            break
    return batches


def test_a_state_resumes_on_another_world_size_with_the_same_batches_and_draws(many):
    whole = take([iter(loader) for loader in world(many, 1)])
    assert len(whole) == 6 and sorted(i for b in whole for i, _ in b) == list(range(72))
    for before, after in [(4, 2), (2, 3), (3, 1), (6, 4)]:
        loaders = world(many, before)
        done = take([iter(loader) for loader in loaders], count=2)
        assert done == whole[:2], before
        state = loaders[0].state_dict()  # rank 0's: 2 batches, i.e. 2 global batches
        resumed = take([iter(loader) for loader in world(many, after, state)])
        assert resumed == whole[2:], (before, after)  # same samples, order and draws


def test_a_state_from_another_global_batch_size_is_refused(many):
    loaders = world(many, 2)
    take([iter(loader) for loader in loaders], count=1)
    state = loaders[0].state_dict()
    dataset = Noisy(many)
    sampler = ShardShuffle(dataset, global_batch_size=6, seed=5, window=2, rank=0, world_size=2)
    other = FastLoader(dataset, batch_size=3, sampler=sampler, seed=9, num_workers=0)
    with pytest.raises(ValueError, match="batch_size"):
        other.load_state_dict(state)


def test_a_state_is_refused_on_the_same_samples_cut_into_other_shards(folder, tmp_path):
    def loader(shards: Path) -> FastLoader:
        dataset = ShardedDataset(shards)
        sampler = ShardShuffle(dataset, global_batch_size=3, seed=5, window=2)
        return FastLoader(dataset, batch_size=3, sampler=sampler, num_workers=0)

    write_shards(folder, tmp_path / "small", shard_size=20_000)
    write_shards(folder, tmp_path / "large", shard_size=60_000)  # the same 18 samples
    small = loader(tmp_path / "small")
    next(iter(small))
    state = small.state_dict()
    with pytest.raises(ValueError, match=r"cannot resume: .*'shard_set'"):
        loader(tmp_path / "large").load_state_dict(state)
    again = loader(tmp_path / "small")
    again.load_state_dict(state)  # the same set resumes


@pytest.mark.slow
def test_the_command_line_converts_describes_and_verifies_a_shard_set(folder, tmp_path):
    fastload = [sys.executable, "-m", "fastload.tools.cli"]
    run = lambda *args: subprocess.run([*fastload, *map(str, args)], capture_output=True,  # noqa: E731
                                       text=True, timeout=300)  # fmt: skip
    converted = run("convert", folder, tmp_path / "s", "--shards", "--shard-size", "30kB")
    info = json.loads(run("info", tmp_path / "s").stdout)
    assert info["samples"] == 18 and info["shards"] > 1
    assert converted.returncode == 0
    assert converted.stdout == f"{tmp_path / 's'}: 18 samples in {info['shards']} shards\n"
    assert run("verify", tmp_path / "s").stdout.endswith("18 samples verified\n")
    first = ShardedDataset(tmp_path / "s").shards[0]
    with open(tmp_path / "s" / first.name, "r+b") as file:
        file.write(b"\xff" * 600)  # the first member's header and data
    broken = run("verify", tmp_path / "s")
    assert broken.returncode == 1 and f"{first.name}: its SHA-256 differs" in broken.stdout
    refused = run("convert", folder, tmp_path / "s", "--shards", "--workers", "2")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1


class Fetches:
    """The transport of a shard set in object storage, over a local folder: the readers
    open the folder's files; the download-ahead's calls are recorded: the shards claimed
    and fetched (by number) and the plans announced. The shards numbered in ``in_cache``
    are as if a pass before had left them in the cache."""

    cache_limit = None

    def __init__(self, dataset: ShardedDataset) -> None:
        self.folder, self.shards = dataset.path, dataset.shards
        self.claimed: list[int] = []
        self.fetched: list[int] = []
        self.planned: list[str] | None = None
        self.in_cache: set[int] = set()

    def cached(self, shard) -> bool:
        return self.shards.index(shard) in self.in_cache

    def open(self, shard) -> int:
        return os.open(self.folder / shard.name, os.O_RDONLY)

    def table(self, shard) -> bytes:
        raise AssertionError(f"{shard.name}: a table inside its shard is read through open")

    def prefetch(self, shard, use: int, claimed=lambda: None) -> bool:
        self.claimed.append(self.shards.index(shard))
        claimed()
        self.fetched.append(self.shards.index(shard))
        return True

    def plan(self, names: list[str]) -> None:
        self.planned = names

    def forget_plan(self) -> None:
        self.planned = None


def in_a_bucket(folder: Path, **depth) -> tuple[ShardedDataset, Fetches]:
    """``folder``'s shard set as if it were in object storage, and its transport."""
    dataset = ShardedDataset(folder, decode="tensor", **depth)
    dataset.transport = Fetches(dataset)
    return dataset, dataset.transport


def wait_for(condition) -> None:
    deadline = time.monotonic() + 10  # a bound on the wait, not a measurement
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # time to fetch more than it should, were it to


def first_uses(dataset: ShardedDataset, order: list[int]) -> list[int]:
    return list(dict.fromkeys(dataset.shard_of(index) for index in order))


def due(dataset: ShardedDataset, order: list[int], handed: int, ahead: int) -> list[int]:
    """The shards a download-ahead ``ahead`` deep has fetched once the reader has been
    handed ``order`` up to position ``handed``: those first used by then, and ``ahead``
    more."""
    reached = len(first_uses(dataset, order[: handed + 1]))
    return sorted(first_uses(dataset, order)[: reached + ahead])


def test_the_sampler_only_orders_the_loader_starts_the_download_ahead(many):
    dataset, fetches = in_a_bucket(many)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=2)
    assert list(sampler) == sampler.rank_order() and sorted(sampler) == list(range(72))
    assert fetches.claimed == fetches.fetched == [] and fetches.planned is None
    loader = FastLoader(dataset, batch_size=12, sampler=sampler, num_workers=0)
    labels = torch.cat([labels for _, labels in loader]).tolist()
    assert labels == [dataset[index][1] for index in sampler.rank_order()]
    # every shard fetched ahead, once; the plan forgotten at the end
    assert sorted(fetches.fetched) == list(range(len(dataset.shards)))
    assert fetches.planned is None


def test_the_loader_downloads_shards_in_order_of_first_use_a_few_ahead(many):
    dataset, fetches = in_a_bucket(many, download_ahead=2)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=2)
    order = sampler.rank_order()
    expected = first_uses(dataset, order)
    loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=0,
                        super_batches=False)  # fmt: skip
    batches = iter(loader)
    next(batches)  # the reader has been handed positions 0 to 3
    # claimed before the first batch was cut: no worker starts a download of its own
    assert sorted(fetches.claimed[:3]) == sorted(expected[:3])
    wait_for(lambda: len(fetches.fetched) >= len(due(dataset, order, 3, 2)))
    # the shards being read and 2 ahead, no more (fetched 2 at a time: in any order)
    assert sorted(fetches.fetched) == due(dataset, order, 3, 2)
    # batches enter the next shards: more, and no more than 2 ahead
    for handed in (7, 11, 15):
        next(batches)
        wanted = due(dataset, order, handed, 2)
        wait_for(lambda wanted=wanted: len(fetches.fetched) >= len(wanted))
        assert sorted(fetches.fetched) == wanted
    list(batches)  # the reader at the end: the thread stops where it is
    fetched = fetches.fetched  # each once (those under way at the stop may finish later)
    assert len(set(fetched)) == len(fetched) and set(fetched) <= set(expected)


def test_a_resumed_epoch_downloads_from_where_it_resumes(many):
    dataset, fetches = in_a_bucket(many, download_ahead=1)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=1)
    order = sampler.rank_order()
    loader = FastLoader(dataset, batch_size=12, sampler=sampler, num_workers=0,
                        super_batches=False)  # fmt: skip
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = loader.state_dict()
    list(batches)
    dataset, fetches = in_a_bucket(many, download_ahead=1)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=1)
    loader = FastLoader(dataset, batch_size=12, sampler=sampler, num_workers=0,
                        super_batches=False)  # fmt: skip
    loader.load_state_dict(state)
    batches = iter(loader)
    _, labels = next(batches)
    assert labels.tolist() == [dataset[index][1] for index in order[36:48]]
    # the first claims: the shards the resumed epoch reads first, not those it skipped
    assert sorted(fetches.claimed[:2]) == sorted(first_uses(dataset, order[36:])[:2])
    list(batches)
    # none of the shards the resume skipped (window 1: read shard after shard)
    skipped = set(first_uses(dataset, order[:36]))
    assert skipped.isdisjoint(first_uses(dataset, order[36:]))
    assert fetches.fetched and skipped.isdisjoint(fetches.fetched)


@pytest.mark.parametrize("depth", ["two shards' bytes", "one byte"])
def test_a_depth_in_bytes_fetches_the_shards_ahead_whose_sizes_fit_it(many, depth):
    dataset, _ = in_a_bucket(many)
    first_use = first_uses(
        dataset, ShardShuffle(dataset, global_batch_size=12, seed=1, window=2).rank_order()
    )
    sizes = [dataset.shards[shard].size for shard in first_use]
    budget, fetched = (sizes[1] + sizes[2], 3) if depth == "two shards' bytes" else (1, 2)
    dataset, fetches = in_a_bucket(many, download_ahead=0, download_ahead_bytes=budget)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=2)
    batches = iter(FastLoader(dataset, batch_size=1, sampler=sampler, num_workers=0,
                              super_batches=False))  # fmt: skip
    next(batches)  # the reader is in the first shard
    wait_for(lambda: len(fetches.fetched) >= fetched)
    # the shard being read, the next one always, then as many as the bytes allow
    assert sorted(fetches.fetched) == sorted(first_use[:fetched])
    list(batches)


class Gated:
    """A transport over ``count`` shards of 100 bytes whose downloads end when the test
    lets each go (at most 10 s later: a bound, not a measurement)."""

    def __init__(self, count: int) -> None:
        from fastload.shards.format.index import Shard

        self.cache_limit = None
        self.shards = [Shard(name=f"s{i:04d}.tar", size=100, sha256="", count=2)
                       for i in range(count)]  # fmt: skip
        self.let_go = {shard.name: threading.Event() for shard in self.shards}
        self.started: list[str] = []

    def cached(self, shard) -> bool:
        return False

    def plan(self, names: list[str]) -> None:
        pass

    def forget_plan(self) -> None:
        pass

    def prefetch(self, shard, use: int, claimed=lambda: None) -> bool:
        claimed()
        self.started.append(shard.name)
        self.let_go[shard.name].wait(10)
        return True


@pytest.mark.parametrize("grows_to", [4, None], ids=["follows the link", "fixed"])
def test_a_depth_left_to_the_link_grows_when_the_reader_enters_a_shard_still_downloading(
    grows_to,
):
    from fastload.shards.stores.download_ahead import download_ahead

    transport = Gated(12)
    names = [shard.name for shard in transport.shards]
    starts = list(range(0, 24, 2))  # 2 samples a shard, read shard after shard
    downloads = download_ahead(transport, transport.shards, starts, list(range(24)),
                               ahead=2, grows_to=grows_to)  # fmt: skip
    try:
        wait_for(lambda: len(transport.started) >= 3)
        # shards 1 and 2 still downloading: the first ones, started together, never late
        downloads.reached(2)
        downloads.reached(4)
        assert downloads.ahead == 2
        downloads.reached(6)  # shard 3 still downloading: one deeper
        deeper = 3 if grows_to else 2
        assert downloads.ahead == deeper
        wait_for(lambda: len(transport.started) >= 4 + deeper)
        assert sorted(transport.started) == names[: 4 + deeper]  # as deep as that, no more
        transport.let_go[names[4]].set()
        wait_for(lambda: 4 in downloads.ended)
        downloads.reached(8)  # shard 4 downloaded in time: as deep as before
        assert downloads.ahead == deeper
        downloads.reached(10)  # shards 5 and 6 late: one deeper, then no deeper than 4
        downloads.reached(12)
        assert downloads.ahead == (4 if grows_to else 2)
    finally:
        for event in transport.let_go.values():
            event.set()
        downloads.stop()


@pytest.mark.parametrize(("limit", "deepest"), [(None, 32), (100 * 20, 10), (100 * 4, 8),
                                               (100 * 200, 32)])  # fmt: skip
def test_a_depth_left_to_the_link_grows_to_half_what_the_cache_holds(limit, deepest):
    from fastload.shards.stores import download_ahead

    shards = Plans(50, limit).shards
    assert download_ahead.deepest(limit, shards) == deepest


class NeverAhead(Fetches):
    """:class:`Fetches` whose downloads end only when the test lets them: the reader
    enters every shard while it is still downloading."""

    def __init__(self, dataset: ShardedDataset) -> None:
        super().__init__(dataset)
        self.let_go = threading.Event()

    def prefetch(self, shard, use: int, claimed=lambda: None) -> bool:
        self.claimed.append(self.shards.index(shard))
        claimed()
        self.let_go.wait(10)  # a bound, not a measurement
        self.fetched.append(self.shards.index(shard))
        return True


@pytest.mark.parametrize("download_ahead", [None, 8])
def test_the_next_pass_starts_as_deep_as_following_the_link_led_the_last(many, download_ahead):
    from fastload.shards.stores.download_ahead import START_DEPTH

    dataset = ShardedDataset(many, decode="tensor", download_ahead=download_ahead)
    dataset.transport = fetches = NeverAhead(dataset)
    sampler = ShardShuffle(dataset, global_batch_size=1, seed=1, window=1)
    loader = FastLoader(dataset, batch_size=1, sampler=sampler, num_workers=0)
    assert dataset.download_depth == START_DEPTH == 8
    try:
        assert len(list(loader)) == 72
    finally:
        fetches.let_go.set()
    # 18 shards entered one after another, all but the first 9 (started together) late
    assert dataset.download_depth == (8 + 9 if download_ahead is None else 8)
    claimed = len(fetches.claimed)
    batches = iter(loader)
    next(batches)  # claimed before the first batch: the shard being read and the depth
    assert len(fetches.claimed) - claimed == (18 if download_ahead is None else 9)
    list(batches)


def test_a_shard_the_cache_holds_is_neither_claimed_nor_fetched_ahead(many):
    dataset, fetches = in_a_bucket(many)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=2)
    order = sampler.rank_order()
    first_use = first_uses(dataset, order)
    fetches.in_cache = set(first_use[::2])  # every other shard, as a pass before left them
    loader = FastLoader(dataset, batch_size=12, sampler=sampler, num_workers=0)
    labels = torch.cat([labels for _, labels in loader]).tolist()
    assert labels == [dataset[index][1] for index in order]
    # the others fetched, each once
    uncached = [shard for shard in first_use if shard not in fetches.in_cache]
    assert sorted(fetches.claimed) == sorted(fetches.fetched) == sorted(uncached)


def test_a_warm_pass_never_deepens_a_depth_left_to_the_link(many):
    dataset = ShardedDataset(many, decode="tensor")
    dataset.transport = fetches = NeverAhead(dataset)  # a download would never end...
    fetches.in_cache = set(range(len(dataset.shards)))  # ...but every shard is cached
    sampler = ShardShuffle(dataset, global_batch_size=1, seed=1, window=1)
    assert len(list(FastLoader(dataset, batch_size=1, sampler=sampler, num_workers=0))) == 72
    # every shard entered counts as downloaded: none late, the depth where it started
    assert fetches.claimed == [] and dataset.download_depth == 8


def test_no_depth_downloads_nothing_ahead(many):
    dataset, fetches = in_a_bucket(many, download_ahead=0)
    sampler = ShardShuffle(dataset, global_batch_size=12, seed=1, window=2)
    assert len(list(FastLoader(dataset, batch_size=12, sampler=sampler, num_workers=0))) == 6
    assert fetches.claimed == []


class Plans:
    """A transport over ``count`` shards of 100 bytes that records the plans announced."""

    def __init__(self, count: int, cache_limit: int | None) -> None:
        from fastload.shards.format.index import Shard

        self.cache_limit, self.plans = cache_limit, []
        self.shards = [Shard(name=f"s{i:04d}.tar", size=100, sha256="", count=2)
                       for i in range(count)]  # fmt: skip

    def cached(self, shard) -> bool:
        return False

    def plan(self, names: list[str]) -> None:
        self.plans.append(names)

    def forget_plan(self) -> None:
        pass

    def prefetch(self, shard, use: int, claimed=lambda: None) -> bool:
        claimed()
        return True


@pytest.mark.parametrize(("limit", "named"), [(None, 256), (100 * 500, 501), (100 * 5000, 600)])
def test_a_plan_names_the_shards_the_cache_can_hold_not_every_one_left(limit, named):
    from fastload.shards.stores.download_ahead import download_ahead

    transport = Plans(600, limit)
    starts = list(range(0, 2 * 600, 2))
    downloads = download_ahead(transport, transport.shards, starts, list(range(2 * 600)), ahead=2)
    downloads.stop()
    # the first plan: the shard being read, then the next ones, as many as fit (or 256)
    assert transport.plans[0] == [f"s{i:04d}.tar" for i in range(named)]


@pytest.mark.parametrize(("argument", "value", "message"), [
    ("download_ahead_bytes", 0, "download_ahead_bytes must be an int >= 1, got 0"),
    ("download_ahead", -1, "download_ahead must be an int >= 0, got -1"),
    ("download_ahead", 2.5, "download_ahead must be an int >= 0, got 2.5"),
])  # fmt: skip
def test_a_download_depth_is_checked_by_name(many, argument, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ShardedDataset(many, **{argument: value})


def cache_holding(cache_dir, names: list[str], *, limit: int) -> NodeCache:
    """A node's cache whose index lists ``names``, each cached (100 bytes, its hash recorded
    as a download records it), the first the least recently used."""
    cache = NodeCache(cache_dir, "s3://bucket/set", limit)
    cache.use_index("0" * 64, frozenset(names))
    cache.folder.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(names):
        (cache.folder / name).write_bytes(b"x" * 100)
        (cache.folder / f".{name}.sha256").write_text("0" * 64)
        os.utime(cache.folder / name, (1000 + age, 1000 + age))
    return cache


def test_the_cache_evicts_what_no_plan_reads_then_what_is_read_last(tmp_path):
    cache = cache_holding(tmp_path, ["a.tar", "b.tar", "c.tar", "d.tar"], limit=400)
    cache.plan(["c.tar", "a.tar", "e.tar", "b.tar"])  # d is read by no one: it goes first
    assert cache.make_room(100)
    assert sorted(p.name for p in cache.folder.glob("*.tar")) == ["a.tar", "b.tar", "c.tar"]
    assert cache.make_room(200)  # then b, read last
    assert sorted(p.name for p in cache.folder.glob("*.tar")) == ["a.tar", "c.tar"]
    # a prefetch read third (e) evicts nothing needed sooner (c, a): it is not made
    assert not cache.make_room(300, use=2)
    assert sorted(p.name for p in cache.folder.glob("*.tar")) == ["a.tar", "c.tar"]
    cache.forget_plan()
    assert cache.next_uses() == {}


def test_a_dead_readers_plan_is_dropped(tmp_path):
    from fastload.shards.stores.node_cache import _HOST, PLAN_STALE_S

    cache = NodeCache(tmp_path, "s3://bucket/set", 400)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip

    cache.plan(["y.tar", "z.tar"])
    dead = cache.folder / f".plan-{_HOST}-{int(child.stdout)}.json"
    dead.write_text('["x.tar"]')
    # another container's reader: its PIDs are not ours to ask; fresh, its plan counts
    elsewhere = cache.folder / f".plan-other_host-{os.getpid()}.json"
    elsewhere.write_text('["w.tar", "z.tar"]')
    assert cache.next_uses() == {"y.tar": 0, "z.tar": 1, "w.tar": 0}
    assert not dead.exists()
    stale = time.time() - PLAN_STALE_S - 1
    os.utime(elsewhere, (stale, stale))  # not rewritten for 10 minutes: dropped
    assert cache.next_uses() == {"y.tar": 0, "z.tar": 1} and not elsewhere.exists()


def test_a_resume_of_another_length_encoding_or_shard_size_is_refused(folder, tmp_path):
    broken = sorted((folder / "class_01").iterdir())[0]
    original = broken.read_bytes()
    broken.write_bytes(b"not an image")
    try:  # fails at its first bad image, with the progress already saved
        with pytest.raises(ImageDecodeError):
            write_shards(folder, tmp_path / "s", shard_size=20_000, quality=90, resize=32)
    finally:
        broken.write_bytes(original)
    assert (tmp_path / "s" / PROGRESS).exists()
    with pytest.raises(ShardIndexError, match="conversion did not finish"):
        ShardedDataset(tmp_path / "s")  # never read as a (WebDataset) shard set
    with pytest.raises(ValueError, match=r"quality 90, now 80; shard_size 20000, now 30000"):
        write_shards(folder, tmp_path / "s", shard_size=30_000, quality=80, resize=32,
                     resume=True)  # fmt: skip
    with pytest.raises(ValueError, match="parts: the parts are Ray's"):
        write_shards(folder, tmp_path / "other", parts=2)
    meta = write_shards(folder, tmp_path / "s", shard_size=20_000, quality=90, resize=32,
                        resume=True)  # fmt: skip
    assert meta["samples"] == 18


def test_eviction_deletes_only_shards_the_cache_downloaded_for_its_index(tmp_path):
    # cache_dir given by the user may hold their own files; the cache keeps to its folder
    mine = {"notes.txt": b"my notes", "model.pt": b"weights", "a.tar": b"a tar of mine"}
    for name, data in mine.items():
        (tmp_path / name).write_bytes(data)
    cache = cache_holding(tmp_path, ["s0.tar", "s1.tar"], limit=150)
    (cache.folder / "stray.tar").write_bytes(b"y" * 500)  # no record: not downloaded here
    (cache.folder / ".s1.tar.sha256").unlink()  # interrupted before its record: not owned
    assert cache.make_room(100)
    assert {name: (tmp_path / name).read_bytes() for name in mine} == mine
    assert sorted(p.name for p in cache.folder.glob("*.tar")) == ["s1.tar", "stray.tar"]


def test_a_version_2_shardshuffle_state_is_still_read(folder, tmp_path):
    write_shards(folder, tmp_path / "set", shard_size=20_000)

    def loader() -> FastLoader:
        dataset = ShardedDataset(tmp_path / "set")
        sampler = ShardShuffle(dataset, global_batch_size=3, seed=5, window=2)
        return FastLoader(dataset, batch_size=3, sampler=sampler, num_workers=0)

    whole = [b[1].tolist() for b in loader()]
    first = loader()
    batches = iter(first)
    next(batches)
    state = first.state_dict()
    old_order = {k: v for k, v in state["order"].items() if k not in ("shard_set", "drop_last")}
    version_2 = state | {"version": 2, "order": old_order}
    resumed = loader()
    resumed.load_state_dict(version_2)
    assert [b[1].tolist() for b in resumed] == whole[1:]


def test_a_bucket_reader_refuses_no_attempts_or_no_parallel_reads(tmp_path):
    from fastload.shards.stores.cached import CachedShards
    from fastload.shards.stores.s3 import S3Bucket

    with pytest.raises(ValueError, match="parallel must be an int >= 1, got 0"):
        S3Bucket("s3://bucket/set", parallel=0)
    with pytest.raises(ValueError, match="attempts must be an int >= 1, got 0"):
        CachedShards(S3Bucket("s3://bucket/set"), cache_dir=tmp_path, attempts=0)


def test_a_dead_downloaders_part_goes_only_where_it_is_this_indexs_download(tmp_path):
    cache = NodeCache(tmp_path, "s3://bucket/set", None)
    cache.use_index("0" * 64, frozenset({"s0.tar"}))
    cache.folder.mkdir(parents=True)
    dead = 2**22 + 1  # above any pid this machine hands out
    host = cache.part("s0.tar").name.split("~")[1]
    parts = {
        name: cache.folder / name
        for name in (f".s0.tar~{host}~{dead}~1.part",  # a dead downloader's: goes
                     f".s0.tar.idx~{host}~{dead}~1.part",  # its table's too
                     f".s0.tar~{host}~{os.getpid()}~1.part",  # a live one's: stays
                     f".notes.txt~{host}~{dead}~1.part")  # not a download of the index
    }  # fmt: skip
    for path in parts.values():
        path.write_bytes(b"x")
    cache.use_index("0" * 64, frozenset({"s0.tar"}))
    assert sorted(path.name for path in cache.folder.iterdir()) == sorted(list(parts)[2:])
