"""Shard conversion on a real local Ray instance: the same samples in the same order as a
conversion in one process, to a folder and to a bucket; a failed part named by its file
and resumed without rewriting the finished parts."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastload import make_image_folder
from fastload.decode.opencv import ImageDecodeError
from fastload.shards import ShardedDataset, write_shards
from fastload.shards.format.index import PROGRESS
from fastload.shards.writing.on_ray import split


@given(samples=st.integers(0, 500), parts=st.integers(1, 64))
def test_split_covers_the_samples_in_contiguous_near_equal_parts(samples, parts):
    spans = split(samples, parts)
    assert len(spans) == max(1, min(parts, samples))
    assert spans[0][0] == 0 and spans[-1][1] == samples
    assert all(left[1] == right[0] for left, right in itertools.pairwise(spans))
    sizes = [stop - start for start, stop in spans]
    assert max(sizes) - min(sizes) <= 1


ray = pytest.importorskip("ray", reason="conversion on Ray needs Ray: pip install '.[ray]'")
pytestmark = pytest.mark.slow  # a Ray instance takes seconds to start


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=3, images_per_class=10, size=(64, 48)
    )


@pytest.fixture(scope="module")
def one_process(folder, tmp_path_factory):
    destination = tmp_path_factory.mktemp("one") / "shards"
    write_shards(folder, destination, shard_size=20_000)
    return ShardedDataset(destination)


def same_samples(dataset: ShardedDataset, reference: ShardedDataset) -> bool:
    return len(dataset) == len(reference) and all(
        dataset[i][1] == reference[i][1] and np.array_equal(dataset[i][0], reference[i][0])
        for i in range(len(reference))
    )


def test_ray_writes_the_samples_of_one_process_in_whole_shards_per_part(
    cluster, folder, one_process, tmp_path
):
    meta = write_shards(folder, tmp_path / "shards", shard_size=20_000, ray=True, parts=3)
    dataset = ShardedDataset(tmp_path / "shards")
    assert meta["samples"] == 30 and meta["classes"] == one_process.classes
    assert same_samples(dataset, one_process)
    parts = sorted({shard.name.split("-")[1] for shard in dataset.shards})
    assert parts == ["00000", "00001", "00002"]
    names = [shard.name for shard in dataset.shards]
    assert names == sorted(names)
    dataset.verify()
    assert not (tmp_path / "shards" / PROGRESS).exists()


def test_a_failed_part_names_its_file_and_a_resume_keeps_the_finished_parts(
    cluster, folder, one_process, tmp_path
):
    broken = sorted((folder / "class_02").iterdir())[-1]  # the last part's
    original = broken.read_bytes()
    broken.write_bytes(b"not an image")
    try:
        with pytest.raises(ImageDecodeError, match=broken.name):
            write_shards(folder, tmp_path / "shards", shard_size=20_000, ray=True, parts=3)
    finally:
        broken.write_bytes(original)
    # two CPUs: the third part starts when a first one has finished and been recorded
    done = json.loads((tmp_path / "shards" / PROGRESS).read_text())["done"]
    assert done and "2" not in done
    written = {
        entry["name"]: (tmp_path / "shards" / entry["name"]).stat().st_mtime_ns
        for part in done.values()
        for entry in part["shards"]
    }
    with pytest.raises(FileExistsError, match="pass resume=True"):
        write_shards(folder, tmp_path / "shards", ray=True)
    with pytest.raises(ValueError, match="ran on Ray: resume it with ray=True"):
        write_shards(folder, tmp_path / "shards", shard_size=20_000, resume=True)
    write_shards(folder, tmp_path / "shards", shard_size=20_000, ray=True, resume=True)
    for name, modified in written.items():  # parts recorded as finished were not redone
        assert (tmp_path / "shards" / name).stat().st_mtime_ns == modified
    assert same_samples(ShardedDataset(tmp_path / "shards"), one_process)


def test_bad_images_are_skipped_and_listed_as_in_one_process(cluster, folder, tmp_path):
    broken = sorted((folder / "class_01").iterdir())[3]
    original = broken.read_bytes()
    broken.write_bytes(b"\xff\xd8 a cut JPEG")
    try:
        alone = write_shards(folder, tmp_path / "one", shard_size=20_000, skip_bad=True)
        spread = write_shards(folder, tmp_path / "ray", shard_size=20_000, skip_bad=True,
                              ray=True, parts=4)  # fmt: skip
    finally:
        broken.write_bytes(original)
    assert spread["skipped"] == alone["skipped"] and len(alone["skipped"]) == 1
    assert str(broken) in alone["skipped"][0][0]
    assert same_samples(ShardedDataset(tmp_path / "ray"), ShardedDataset(tmp_path / "one"))


def test_ray_uploads_each_part_to_a_bucket(cluster, folder, one_process, tmp_path):
    boto3 = pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
    from fastload.testing.s3server import LocalS3, swift_installed

    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    with LocalS3() as server:
        options = server.client_options()  # Ray's workers do not see this process's variables
        boto3.client("s3", **options).create_bucket(Bucket="data")
        write_shards(folder, "s3://data/ray", shard_size=20_000, ray=True, parts=2,
                     storage_options=options)  # fmt: skip
        dataset = ShardedDataset("s3://data/ray", cache_dir=tmp_path, storage_options=options)
        assert same_samples(dataset, one_process)
        dataset.verify()


def test_the_command_line_converts_on_ray(folder, one_process, tmp_path):
    converted = subprocess.run(
        [sys.executable, "-m", "fastload.tools.cli", "convert", str(folder),
         str(tmp_path / "shards"), "--shards", "--shard-size", "20kB", "--ray"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert converted.returncode == 0, converted.stderr
    shards = len(ShardedDataset(tmp_path / "shards").shards)
    assert converted.stdout.endswith(f"{tmp_path / 'shards'}: 30 samples in {shards} shards\n")
    assert same_samples(ShardedDataset(tmp_path / "shards"), one_process)
    refused = subprocess.run(
        [sys.executable, "-m", "fastload.tools.cli", "convert", str(folder),
         str(tmp_path / "db.lmdb"), "--ray"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("--ray writes shards: add --shards")


@pytest.fixture
def helpers():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("ray_helpers.py")
    spec = importlib.util.spec_from_file_location("ray_helpers", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_helpers"] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # Ray's workers cannot import tests/
    yield module
    ray.cloudpickle.unregister_pickle_by_value(module)
    del sys.modules["ray_helpers"]


def test_a_ray_worker_killed_mid_part_is_retried_and_the_set_exact(
    cluster, folder, one_process, tmp_path, helpers
):
    source = helpers.KillsItsWorker(folder, at=17, healed=tmp_path / "healed", once=True)
    write_shards(source, tmp_path / "shards", shard_size=20_000, ray=True, parts=3)
    assert (tmp_path / "healed").exists()  # a worker did die, in part 1 of 3
    assert same_samples(ShardedDataset(tmp_path / "shards"), one_process)
    hidden = [p.name for p in (tmp_path / "shards").iterdir() if p.name.startswith(".")]
    assert hidden == []  # the dead attempt's half-written shard is gone too


def test_a_part_whose_worker_always_dies_is_named_and_resumable(
    cluster, folder, one_process, tmp_path, helpers
):
    source = helpers.KillsItsWorker(folder, at=17, healed=tmp_path / "healed", once=False)
    with pytest.raises(RuntimeError, match=r"part 1 \(samples 10-20\): its Ray worker died"):
        write_shards(source, tmp_path / "shards", shard_size=20_000, ray=True, parts=3)
    (tmp_path / "healed").touch()
    write_shards(source, tmp_path / "shards", shard_size=20_000, ray=True, resume=True)
    assert same_samples(ShardedDataset(tmp_path / "shards"), one_process)
