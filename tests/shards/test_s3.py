"""Shard sets in object storage, against a real S3 server on 127.0.0.1 (OpenStack Swift's
S3 API, started and stopped by these tests): written to a bucket, read back through the
cache, with the errors a user meets named."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from common_utils import KILLED_CONVERSION, script_outcome
from fastload import FastLoader, ImageFolder, make_image_folder
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.shards.format.index import INDEX, PROGRESS, ShardIndexError
from fastload.testing.s3server import LocalS3, swift_installed
from old_shard_index import to_version_3

boto3 = pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
if not swift_installed():
    pytest.skip("the local S3 server needs OpenStack Swift: pip install swift",
                allow_module_level=True)  # fmt: skip


@pytest.fixture(scope="module")
def server():
    with LocalS3() as running:
        boto3.client("s3", **running.client_options()).create_bucket(Bucket="data")
        yield running


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=3, images_per_class=8, size=(64, 48)
    )


@pytest.fixture(scope="module")
def url(server, folder):
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server.environment().items():
            patch.setenv(name, value)
        write_shards(folder, "s3://data/train", shard_size=30_000)
    return "s3://data/train"


@pytest.fixture
def aws(server, monkeypatch):
    for name, value in server.environment().items():
        monkeypatch.setenv(name, value)


def test_a_bucket_reads_back_as_the_folder_does(url, folder, aws, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path)
    reference = ImageFolder(folder)
    assert len(dataset) == 24 and dataset.classes == reference.classes
    for index in range(len(dataset)):
        image, label = dataset[index]
        assert label == reference[index][1] and np.array_equal(image, reference[index][0])
    assert files_open_under(dataset.transport.cache)  # the reads' descriptors, kept
    dataset.verify()
    assert files_open_under(dataset.transport.cache) == []  # it closes what it opened
    cached = dataset.transport.cache  # the index's own namespace under cache_dir
    assert cached.is_relative_to(tmp_path / "fastload-shards")
    assert sorted(p.name for p in cached.glob("*.tar")) == [s.name for s in dataset.shards]


def files_open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open."""
    targets = []
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
    return sorted(target for target in targets if target.startswith(str(folder)))


def test_the_client_comes_from_arguments_as_well_as_the_environment(url, server, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, storage_options=server.client_options())
    assert dataset[0][1] == 0


def test_the_loaders_process_downloads_ahead_of_its_workers(url, aws, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor")
    sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=2)
    assert len(dataset.shards) <= dataset.download_depth + 1  # all claimed before batch 1
    loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=2)
    asked = gets_of(dataset.transport)  # this process's GETs (a worker's client is its own)
    labels = torch.cat([labels for _, labels in loader]).tolist()
    # every shard came once, through this process: no worker raced it to a download
    assert sorted(name.rsplit("/", 1)[1] for name in asked) == [s.name for s in dataset.shards]
    assert labels == [dataset[index][1] for index in sampler]


def test_the_cache_stays_under_its_budget(url, aws, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, cache_limit=70_000)
    largest = max(shard.size for shard in dataset.shards)
    for index in range(len(dataset)):
        dataset[index]
        cached = sum(path.stat().st_size for path in dataset.transport.cache.glob("*.tar"))
        assert cached <= 70_000 + largest  # the one being read may push it past, briefly


def test_a_shard_that_fails_its_hash_is_named_with_its_url(url, aws, tmp_path, server):
    dataset = ShardedDataset(url, cache_dir=tmp_path)
    shard = dataset.shards[0]
    client = boto3.client("s3", **server.client_options())
    original = client.get_object(Bucket="data", Key=f"train/{shard.name}")["Body"].read()
    client.put_object(Bucket="data", Key=f"train/{shard.name}", Body=b"\0" * len(original))
    try:
        with pytest.raises(
            ShardIndexError, match=f"s3://data/train/{shard.name}: its SHA-256 differs"
        ):
            dataset[0]
        # nothing unchecked entered the cache (its member table, checked, did)
        entered = [shard.name, f".{shard.name}.part", f".{shard.name}.sha256"]
        assert not [path for name in entered for path in tmp_path.rglob(name)]
    finally:
        client.put_object(Bucket="data", Key=f"train/{shard.name}", Body=original)


def test_a_missing_index_bucket_or_credential_is_said_plainly(
    url, aws, server, tmp_path, monkeypatch
):
    with pytest.raises(ShardIndexError, match=r"s3://data/nothing/index\.json: no index\.json"):
        ShardedDataset("s3://data/nothing", cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="the bucket 'absent' does not exist"):
        ShardedDataset("s3://absent/train", cache_dir=tmp_path)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(PermissionError, match="the endpoint refused the credentials"):
        ShardedDataset(url, cache_dir=tmp_path)


@pytest.mark.slow
def test_an_epoch_through_slow_downs_cut_bodies_and_stalls_is_exact(
    url, server, folder, tmp_path, monkeypatch
):
    from botocore.config import Config

    from fastload.shards.stores import s3
    from fastload.testing.proxy import FaultyProxy

    monkeypatch.setattr(s3, "CHUNK", 4096)  # many ranged GETs a shard: many faults

    # every 4th request a 503 SlowDown, every 5th body cut in half, every 7th stalled
    # past the read timeout, every 31st with a byte changed: botocore retries the
    # requests, fastload the bodies, and the shards that fail their hash
    with FaultyProxy(server.endpoint, slow_down=4, truncate=5, stall=7, stall_s=1.5,
                     corrupt=31) as proxy:  # fmt: skip
        options = {**server.client_options(), "endpoint_url": proxy.endpoint,
                   "config": Config(read_timeout=1, connect_timeout=1)}  # fmt: skip
        dataset = ShardedDataset(url, cache_dir=tmp_path, storage_options=options)
        reference = ImageFolder(folder)
        order = list(ShardShuffle(dataset, global_batch_size=4, seed=3, window=2))
        for index in order:
            image, label = dataset[index]
            assert label == reference[index][1] and np.array_equal(image, reference[index][0])
        # what entered the cache is what was written, the member tables too
        dataset.verify()
        # stalls are asked again, within the budget (whether a hedge wins is the clock's)
        counts = dataset.transport.bucket.hedge_counts
        assert counts["requests"] > 0 and counts["hedged"] <= 0.05 * max(counts["requests"], 20)
    assert len(order) == 24 and sorted(order) == list(range(24))
    assert all(proxy.counts[fault] for fault in ("slow_down", "truncate", "stall", "corrupt"))


def objects(server, prefix: str) -> dict[str, tuple[str, object]]:
    """``name -> (ETag, LastModified)`` of the objects under ``prefix``."""
    listing = boto3.client("s3", **server.client_options()).list_objects_v2(
        Bucket="data", Prefix=f"{prefix}/"
    )
    return {
        entry["Key"].removeprefix(f"{prefix}/"): (entry["ETag"], entry["LastModified"])
        for entry in listing.get("Contents", [])
    }


def test_a_killed_upload_resumes_without_uploading_finished_shards_again(
    folder, server, aws, tmp_path
):
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERSION, str(folder), "s3://data/killed"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -9
    uploaded = objects(server, "killed")
    finished = {name: stamp for name, stamp in uploaded.items() if name.endswith(".tar")}
    assert finished and PROGRESS in uploaded and INDEX not in uploaded
    with pytest.raises(ShardIndexError, match="conversion did not finish"):
        ShardedDataset("s3://data/killed", cache_dir=tmp_path)
    with pytest.raises(FileExistsError, match="pass resume=True"):
        write_shards(ImageFolder(folder, decode="numpy"), "s3://data/killed")
    time.sleep(1.1)  # the server's LastModified counts seconds: a new upload would differ
    write_shards(ImageFolder(folder, decode="numpy"), "s3://data/killed", shard_size=20_000,
                 resume=True)  # fmt: skip
    after = objects(server, "killed")
    assert {name: after[name] for name in finished} == finished
    assert PROGRESS not in after and INDEX in after
    write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "whole", shard_size=20_000)
    resumed = ShardedDataset("s3://data/killed", cache_dir=tmp_path / "cache")
    whole = ShardedDataset(tmp_path / "whole")
    assert [shard.sha256 for shard in resumed.shards] == [shard.sha256 for shard in whole.shards]


def test_a_bucket_holding_the_users_shards_under_fastloads_names_is_refused_untouched(
    folder, server, aws
):
    client = boto3.client("s3", **server.client_options())
    client.put_object(Bucket="data", Key="mine/shard-000000.tar", Body=b"the user's own")
    before = objects(server, "mine")
    message = r"^s3://data/mine/shard-000000\.tar: a file a new conversion would write over"
    with pytest.raises(FileExistsError, match=message):
        write_shards(folder, "s3://data/mine")
    assert objects(server, "mine") == before  # no progress, nothing replaced
    body = client.get_object(Bucket="data", Key="mine/shard-000000.tar")["Body"].read()
    assert body == b"the user's own"


def put_webdataset_tars(client, prefix: str, samples: list[tuple[bytes, int]], per_tar: int):
    """``samples`` as public WebDataset tars (``000000.jpg`` + ``000000.cls``) at ``prefix``."""
    import io
    import tarfile

    for number in range(len(samples) // per_tar):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for index in range(per_tar * number, per_tar * number + per_tar):
                image, label = samples[index]
                for extension, data in (("jpg", image), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{index:06d}.{extension}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
        client.put_object(Bucket="data", Key=f"{prefix}/train-{number}.tar", Body=buffer.getvalue())


def test_two_sources_sharing_a_cache_dir_never_share_an_entry(folder, server, aws, tmp_path):
    client = boto3.client("s3", **server.client_options())
    classes = sorted(path.name for path in folder.iterdir())
    photos = [(path.read_bytes(), classes.index(path.parent.name))
              for path in sorted(folder.rglob("*.jpg"))]  # fmt: skip
    first, second = photos[:6], photos[-6:][::-1]
    put_webdataset_tars(client, "one", first, per_tar=3)  # the same tar names in both
    put_webdataset_tars(client, "two", second, per_tar=3)
    for url, samples in [("s3://data/one", first), ("s3://data/two", second)] * 2:
        dataset = ShardedDataset(url, cache_dir=tmp_path, decode=None)
        assert [(dataset[i][0].numpy().tobytes(), dataset[i][1]) for i in range(6)] == samples
    folders = sorted(p.name for p in (tmp_path / "fastload-shards").iterdir())
    assert len(folders) == 2 and folders[0].startswith("data_one-")


def test_public_webdataset_shards_in_a_bucket_are_indexed_once_into_the_cache(
    folder, server, aws, tmp_path
):
    client = boto3.client("s3", **server.client_options())
    classes = sorted(path.name for path in folder.iterdir())
    reference = [(path.read_bytes(), classes.index(path.parent.name))
                 for path in sorted(folder.rglob("*.jpg"))][:10]  # fmt: skip
    put_webdataset_tars(client, "wds", reference, per_tar=5)
    dataset = ShardedDataset("s3://data/wds", cache_dir=tmp_path, decode=None)
    assert len(dataset) == 10 and [shard.name for shard in dataset.shards] == [
        "train-0.tar", "train-1.tar"]  # fmt: skip
    assert [(dataset[i][0].numpy().tobytes(), dataset[i][1]) for i in range(10)] == reference
    index = dataset.transport.cache / INDEX
    assert index.exists() and index.parent.name == "scanned"
    assert json.loads(index.read_bytes())["version"] == 3  # O(shards); tables beside it
    assert sorted(path.name for path in index.parent.glob("*.idx")) == [
        "train-0.tar.idx", "train-1.tar.idx"]  # fmt: skip
    scanned = index.stat().st_mtime_ns
    again = ShardedDataset("s3://data/wds", cache_dir=tmp_path, decode=None)
    assert len(again) == 10 and index.stat().st_mtime_ns == scanned
    again.verify()
    (index.parent / "train-1.tar.idx").unlink()  # the cache's files, taken from under it
    with pytest.raises(
        ShardIndexError,
        match=r"train-1\.tar\.idx: the member table of "
        r"train-1\.tar is missing from the scan kept in the cache: remove",
    ):
        ShardedDataset("s3://data/wds", cache_dir=tmp_path, decode=None)[9]
    with pytest.raises(ShardIndexError, match=r"no index\.json"):  # no tar either
        ShardedDataset("s3://data/nothing-here", cache_dir=tmp_path / "empty")


def test_a_shard_is_trusted_only_by_a_hash_record_written_after_it(url, aws, tmp_path, monkeypatch):
    from fastload.shards.stores import node_cache

    expected = ShardedDataset(url, cache_dir=tmp_path)[0]
    dataset = ShardedDataset(url, cache_dir=tmp_path)
    cache, shard = dataset.transport, dataset.shards[0]
    stale = cache.cache / f".{shard.name}.sha256"
    (cache.cache / shard.name).unlink()
    (cache.cache / shard.name).write_bytes(b"\0" * shard.size)  # another shard's bytes...
    stale.write_text("f" * 64)  # ...under a record that does not match the index: fetched again
    replace = os.replace

    def killed_before_the_record(source, target):
        if str(target).endswith(".sha256"):
            raise KeyboardInterrupt("killed between the shard and its record")
        replace(source, target)

    monkeypatch.setattr(node_cache.os, "replace", killed_before_the_record)
    with pytest.raises(KeyboardInterrupt):
        dataset[0]
    monkeypatch.setattr(node_cache.os, "replace", replace)
    assert not stale.exists()  # the shard is new, its record not written: not trusted
    fresh = ShardedDataset(url, cache_dir=tmp_path)
    image, label = fresh[0]
    assert label == expected[1] and np.array_equal(image, expected[0]) and stale.exists()


def test_info_and_verify_take_a_bucket_url(url, aws, tmp_path, monkeypatch, capsys):
    import json

    from fastload.tools.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))  # the default cache, under ~/.cache/fastload
    main(["info", url])
    described = json.loads(capsys.readouterr().out)
    assert described["samples"] == 24 and described["shards"] >= 2
    main(["verify", url])
    assert capsys.readouterr().out == f"{url}: {described['shards']} shards, 24 samples verified\n"
    assert (tmp_path / ".cache" / "fastload" / "fastload-shards").is_dir()


def test_the_progress_costs_the_same_for_every_shard(folder, server, aws, tmp_path):
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERSION, str(folder), "s3://data/records"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -9
    client = boto3.client("s3", **server.client_options())
    listing = client.list_objects_v2(Bucket="data", Prefix="records/")["Contents"]
    sizes = {entry["Key"].removeprefix("records/"): entry["Size"] for entry in listing}
    shards = sorted(name for name in sizes if name.endswith(".tar"))
    records = sorted(name for name in sizes if name.startswith(f"{PROGRESS}.shard-"))
    assert len(shards) >= 2 and len(records) == len(shards)  # one small record a shard
    assert sizes[PROGRESS] < 1000  # what the conversion is, written once: no shard list
    write_shards(ImageFolder(folder, decode="numpy"), "s3://data/records", shard_size=20_000,
                 resume=True)  # fmt: skip
    left = [e["Key"] for e in client.list_objects_v2(Bucket="data", Prefix="records/")["Contents"]]
    assert not any(PROGRESS in key for key in left)  # the progress goes with the index


@pytest.fixture
def read_only_view(tmp_path):
    """A read-only bind mount of ``tmp_path / "writable"`` (root only; skipped elsewhere)."""
    writable, view = tmp_path / "writable", tmp_path / "read-only"
    writable.mkdir()
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(writable), str(view)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"a read-only cache needs a bind mount: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield writable, view
    finally:
        subprocess.run(["umount", "--lazy", str(view)], check=True)  # open shards let go later


def test_a_warm_read_only_cache_is_read_and_a_cold_one_says_so(url, aws, read_only_view):
    writable, view = read_only_view
    warm = ShardedDataset(url, cache_dir=writable)
    expected = [warm[index] for index in range(len(warm))]  # every shard now cached
    dataset = ShardedDataset(url, cache_dir=view)
    sampler = ShardShuffle(dataset, global_batch_size=4, seed=1, window=2)
    for index in sampler:
        image, label = dataset[index]
        assert label == expected[index][1] and np.array_equal(image, expected[index][0])
    shard = dataset.shards[-1]
    (writable / dataset.transport.cache.relative_to(view) / shard.name).unlink()  # now cold
    cold = ShardedDataset(url, cache_dir=view)
    with pytest.raises(OSError, match=f"{view}.*: the shard cache is read-only and {shard.name} "
                                      "is not in it: give a writable cache_dir"):  # fmt: skip
        cold[len(cold) - 1]


def test_a_full_disk_is_said_naming_the_cache(url, aws, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(small)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs: {mounted.stderr.decode().strip()}")
    try:
        dataset = ShardedDataset(url, cache_dir=small)
        with pytest.raises(OSError, match=f"{small}.*: no space left for shard-000000.tar"):
            dataset[0]
        assert not [p for p in small.rglob("*") if p.name.endswith(".part")]  # nothing half
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)


@pytest.mark.slow
def test_an_epoch_is_exact_through_the_server_killed_and_restarted_mid_epoch(folder, tmp_path):
    import threading

    with LocalS3() as server, pytest.MonkeyPatch.context() as patch:
        for name, value in server.environment().items():
            patch.setenv(name, value)
        boto3.client("s3", **server.client_options()).create_bucket(Bucket="data")
        write_shards(folder, "s3://data/crash", shard_size=10_000)
        dataset = ShardedDataset("s3://data/crash", cache_dir=tmp_path, decode="tensor",
                                 download_ahead=1)  # fmt: skip
        assert len(dataset.shards) >= 6
        sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=1)
        expected = [dataset[index][1] for index in sampler]  # read from a warm cache...
        shutil.rmtree(tmp_path / "fastload-shards")  # ...which goes: every shard read anew
        dataset = ShardedDataset("s3://data/crash", cache_dir=tmp_path, decode="tensor",
                                 download_ahead=1)  # fmt: skip
        sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=1)
        labels: list[int] = []
        restart = threading.Timer(2.0, server.restart_endpoint)
        for step, (_, batch) in enumerate(FastLoader(dataset, batch_size=4, sampler=sampler,
                                                      num_workers=0)):  # fmt: skip
            labels += batch.tolist()
            if step == 1:  # the download-ahead thread is fetching the next shard
                server.kill_endpoint()
                restart.start()
        restart.join()
        assert labels == expected


def put_version_3(client, folder, prefix: str, work) -> str:
    """``folder`` written as a shard set with its member tables beside the shards
    (index version 3, an upgraded older set), uploaded under ``prefix``; its URL."""
    write_shards(folder, work / prefix, shard_size=30_000)
    to_version_3(work / prefix)
    for path in sorted((work / prefix).iterdir()):
        client.upload_file(str(path), "data", f"{prefix}/{path.name}")
    return f"s3://data/{prefix}"


def test_a_member_table_is_fetched_on_first_read_and_a_bad_one_is_named(
    server, folder, aws, tmp_path
):
    client = boto3.client("s3", **server.client_options())
    put_version_3(client, folder, "tables", tmp_path / "written")
    name = ShardedDataset("s3://data/tables", cache_dir=tmp_path).shards[0].name + ".idx"
    table = client.get_object(Bucket="data", Key=f"tables/{name}")["Body"].read()
    client.put_object(Bucket="data", Key=f"tables/{name}", Body=table[:-1] + b"\x00")
    dataset = ShardedDataset("s3://data/tables", cache_dir=tmp_path)  # reads no table
    with pytest.raises(ShardIndexError, match=f"s3://data/tables/{name}: its SHA-256 differs"):
        dataset[0]
    client.delete_object(Bucket="data", Key=f"tables/{name}")
    with pytest.raises(ShardIndexError, match=f"s3://data/tables/{name}: the member table"):
        ShardedDataset("s3://data/tables", cache_dir=tmp_path)[0]
    client.put_object(Bucket="data", Key=f"tables/{name}", Body=table)
    assert ShardedDataset("s3://data/tables", cache_dir=tmp_path)[0][1] == 0


def test_a_member_table_read_once_is_kept_in_the_nodes_cache(server, folder, aws, tmp_path):
    client = boto3.client("s3", **server.client_options())
    put_version_3(client, folder, "kept", tmp_path / "written")
    first = ShardedDataset("s3://data/kept", cache_dir=tmp_path)
    image, label = first[0]
    name = first.shards[0].name + ".idx"
    assert (first.transport.cache / name).is_file()
    boto3.client("s3", **server.client_options()).delete_object(Bucket="data",
                                                                  Key=f"kept/{name}")  # fmt: skip
    second = first.shards[1]
    assert first.transport.prefetch(second, use=0)  # as the download-ahead thread does
    assert (first.transport.cache / f"{second.name}.idx").is_file()  # the table came with it
    again = ShardedDataset("s3://data/kept", cache_dir=tmp_path)  # another reader of the node
    image_again, label_again = again[0]  # its table from the cache: the bucket has none now
    assert label_again == label and np.array_equal(image_again, image)
    with pytest.raises(ShardIndexError, match=f"s3://data/kept/{name}: the member table"):
        ShardedDataset("s3://data/kept", cache_dir=tmp_path / "elsewhere")[0]


def gets_of(transport) -> list[str]:
    """The object names ``transport``'s client asks for from now on (appended as asked)."""
    asked: list[str] = []
    transport.bucket.client().meta.events.register(
        "before-send.s3.GetObject", lambda request, **_: asked.append(request.url)
    )
    return asked


def test_a_shards_member_table_comes_inside_it_one_get_a_shard(url, aws, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path)
    transport, shard = dataset.transport, dataset.shards[1]
    asked = gets_of(transport)
    assert len(dataset.members(1)) == shard.count  # what a reader asks first
    assert (transport.cache / shard.name).is_file()  # the shard came, its table inside
    assert not list(transport.cache.glob("*.idx"))
    first = dataset.shard_range(1)[0]
    dataset[first], dataset[first + 1]
    assert [name.rsplit("/", 1)[1] for name in asked] == [shard.name]


def test_a_table_beside_its_shard_comes_with_its_download_one_get_each(
    server, folder, aws, tmp_path
):
    client = boto3.client("s3", **server.client_options())
    url = put_version_3(client, folder, "beside", tmp_path / "written")
    dataset = ShardedDataset(url, cache_dir=tmp_path / "cache")
    transport, shard = dataset.transport, dataset.shards[1]
    asked = gets_of(transport)
    table = transport.table(shard)  # what a reader asks first: the shard comes with it
    assert (transport.cache / shard.name).is_file()
    assert (transport.cache / f"{shard.name}.idx").read_bytes() == table
    assert sorted(name.rsplit("/", 1)[1] for name in asked) == [shard.name, f"{shard.name}.idx"]
    transport.table(shard)
    assert len(asked) == 2  # from the cache now


def test_a_forked_workers_client_reuses_the_service_models_its_parent_parsed(url, aws):
    from fastload.shards.stores import s3

    ShardedDataset(url).transport.bucket.client()  # the index read made this process's client
    parent_models = id(s3._models)
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        in_child = pool.apply(_models_of_a_new_client, (url,))
    assert in_child == (parent_models, parent_models)


def _models_of_a_new_client(url: str) -> tuple[int, int]:
    from fastload.shards.stores import s3

    client = s3.S3Bucket(url).client()  # made in this (forked) process
    return id(client._loader), id(s3._models)


def test_a_table_inside_a_shard_that_is_not_the_indexs_is_named_with_its_url(
    server, folder, aws, tmp_path
):
    from fastload.shards.format.index import shards_digest

    write_shards(folder, "s3://data/inside", shard_size=30_000)
    client = boto3.client("s3", **server.client_options())
    index = json.loads(client.get_object(Bucket="data", Key=f"inside/{INDEX}")["Body"].read())
    index["shards"][1]["table_sha256"] = "0" * 64  # as a hostile or damaged index says
    index["shards_sha256"] = shards_digest(index["shards"])
    client.put_object(Bucket="data", Key=f"inside/{INDEX}", Body=json.dumps(index).encode())
    dataset = ShardedDataset("s3://data/inside", cache_dir=tmp_path)
    name = dataset.shards[1].name
    with pytest.raises(ShardIndexError, match=rf"^s3://data/inside/{name} \(its member table\): "
                       "its SHA-256 differs from the index's"):  # fmt: skip
        dataset[dataset.shard_range(1)[0]]


def deleted_files_held_open(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open though they were deleted (their
    space is not freed while it does)."""
    held = []
    for descriptor in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(folder)) and target.endswith(" (deleted)"):
            held.append(target)
    return held


def test_a_pass_closes_the_shards_it_opened_so_the_next_reads_the_cache_anew(url, aws, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor")
    sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=2)
    loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=0)
    first = torch.cat([labels for _, labels in loader]).tolist()
    shutil.rmtree(tmp_path / "fastload-shards")  # the cache emptied between passes
    assert deleted_files_held_open(tmp_path) == []  # the pass let its shards go
    asked = gets_of(dataset.transport)
    second = torch.cat([labels for _, labels in loader]).tolist()
    assert sorted(second) == sorted(first) == sorted(dataset[i][1] for i in range(24))
    # every shard downloaded again, once, and read from the new file
    assert sorted(name.rsplit("/", 1)[1] for name in asked) == sorted(
        shard.name for shard in dataset.shards
    )
    assert deleted_files_held_open(tmp_path) == []


def test_an_evicted_shard_is_let_go_by_its_reader_so_its_space_is_freed(folder, aws, tmp_path):
    url = "s3://data/small-shards"
    write_shards(folder, url, shard_size=8_000)
    largest = max(shard.size for shard in ShardedDataset(url, cache_dir=tmp_path).shards)
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor", download_ahead=1,
                             cache_limit=3 * largest)  # fmt: skip
    assert len(dataset.shards) >= 6  # several evictions a pass
    sampler = ShardShuffle(dataset, global_batch_size=1, seed=2, window=1)
    batches_held: Counter[str] = Counter()  # evicted shard -> batches it was held open after
    for _ in FastLoader(dataset, batch_size=1, sampler=sampler, num_workers=0):
        batches_held.update(deleted_files_held_open(tmp_path))
    # One shard at a time (window=1), a sample a batch: whenever the download-ahead evicts
    # a shard the reader holds, the reader lets it go once it opens the next shard, at
    # most the longest shard's samples later
    most = max(shard.count for shard in dataset.shards)
    assert max(batches_held.values(), default=0) <= most, batches_held
    assert deleted_files_held_open(tmp_path) == []


def test_a_shard_counts_as_cached_only_checked_and_with_its_table(
    url, server, folder, aws, tmp_path
):
    dataset = ShardedDataset(url, cache_dir=tmp_path / "inside")
    transport, shard = dataset.transport, dataset.shards[0]
    assert not transport.cached(shard)
    transport.open(shard)
    assert transport.cached(shard)
    (transport.cache / f".{shard.name}.sha256").write_text("f" * 64)  # not the index's
    assert not transport.cached(shard)
    client = boto3.client("s3", **server.client_options())
    beside = ShardedDataset(put_version_3(client, folder, "cached", tmp_path / "written"),
                            cache_dir=tmp_path / "beside")  # fmt: skip
    transport, shard = beside.transport, beside.shards[0]
    transport.open(shard)
    (transport.cache / f".{shard.name}.idx.sha256").unlink()  # its table not kept
    assert not transport.cached(shard)
    transport.table(shard)
    assert transport.cached(shard)


def locks_taken(node, monkeypatch) -> Counter[str]:
    """The names ``node`` locks from now on, counted."""
    locked, lock = Counter[str](), node.locked

    def counted(name: str, **wait):
        locked[name] += 1
        return lock(name, **wait)

    monkeypatch.setattr(node, "locked", counted)
    return locked


def test_a_warm_pass_locks_each_shard_once_to_read_it_and_downloads_none(
    url, aws, tmp_path, monkeypatch
):
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor")
    sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=2)
    loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=0)
    cold = torch.cat([labels for _, labels in loader]).tolist()
    locked = locks_taken(dataset.transport.node, monkeypatch)
    asked = gets_of(dataset.transport)
    warm = torch.cat([labels for _, labels in loader]).tolist()
    assert warm == cold and asked == []
    # the reader's open alone: the download-ahead passed every cached shard over
    assert locked == Counter(shard.name for shard in dataset.shards)


def test_a_new_reader_of_a_warm_cache_locks_each_shard_once_for_its_table_and_samples(
    url, folder, aws, tmp_path, monkeypatch
):
    ShardedDataset(url, cache_dir=tmp_path).verify()  # every shard in the cache
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor")  # no table read yet
    locked = locks_taken(dataset.transport.node, monkeypatch)
    loader = FastLoader(dataset, batch_size=4, shuffle=False, num_workers=0)
    labels = torch.cat([labels for _, labels in loader]).tolist()
    assert labels == [label for _, label in ImageFolder(folder)]
    assert locked == Counter(shard.name for shard in dataset.shards)


def test_two_downloaders_never_share_a_part_name(url, aws, tmp_path):
    import threading

    dataset = ShardedDataset(url, cache_dir=tmp_path)
    node, shard = dataset.transport.node, dataset.shards[0]
    names = {node.part(shard.name)}
    thread = threading.Thread(target=lambda: names.add(node.part(shard.name)))
    thread.start()
    thread.join()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        names.add(pool.apply(node.part, (shard.name,)))
    assert len(names) == 3 and all(path.parent == node.folder for path in names)
    # a download leaves another downloader's part alone
    node.folder.mkdir(parents=True, exist_ok=True)
    theirs = node.folder / f".{shard.name}.part"
    theirs.write_bytes(b"another downloader's bytes")
    dataset.transport.local_path(shard)
    assert theirs.read_bytes() == b"another downloader's bytes"


#: A script reading every sample of the bucket ``sys.argv[1]`` (cache ``sys.argv[2]``), its
#: dataset a global of the main module, which keeps itself (as tools that run scripts
#: do) and fastload's modules: the dataset is let go only when the interpreter clears the
#: modules' globals at exit, after those of fastload's modules.
READ_TO_THE_END = """
import sys
import __main__
import fastload.shards

dataset = fastload.shards.ShardedDataset(sys.argv[1], cache_dir=sys.argv[2])
labels = [dataset[index][1] for index in range(len(dataset))]
print(len(labels))
itself = __main__
"""


@pytest.mark.slow
def test_a_script_that_read_a_bucket_exits_without_a_word_on_stderr(url, server, tmp_path):
    outcome = script_outcome(READ_TO_THE_END, url, str(tmp_path), env=server.environment())
    assert outcome == (0, "24\n", "")


#: A script that takes one batch of a loader downloading ahead over the bucket
#: ``sys.argv[1]`` and leaves its pass there: the pass's download-ahead is stopped only
#: when the interpreter clears the modules' globals at exit.
LEAVE_A_PASS_UNFINISHED = """
import sys
import __main__
from fastload import FastLoader
from fastload.shards import ShardedDataset, ShardShuffle

dataset = ShardedDataset(sys.argv[1], cache_dir=sys.argv[2], decode="tensor")
sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=2)
batches = iter(FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=0))
print(len(next(batches)[1]))
itself = __main__
"""


@pytest.mark.slow
def test_a_script_that_left_a_pass_unfinished_exits_without_a_word_on_stderr(url, server, tmp_path):
    outcome = script_outcome(LEAVE_A_PASS_UNFINISHED, url, str(tmp_path), env=server.environment())
    assert outcome == (0, "4\n", "")
