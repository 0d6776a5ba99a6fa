"""Shard sets in Google Cloud Storage and Azure Blob Storage, against real servers on
127.0.0.1 started by these tests (fake-gcs-server from its PyPI wheel, Microsoft's
Azurite from npm): the round trip, forked workers, faults, a killed conversion resumed,
and the errors a user meets, as tests/shards/test_s3.py runs them against S3. A server
that cannot start skips its tests, saying why."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from common_utils import KILLED_CONVERSION, script_outcome
from fastload import FastLoader, ImageFolder, make_image_folder
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.shards.format.index import INDEX, PROGRESS, ShardIndexError
from fastload.shards.stores.obstore_bucket import ObstoreBucket
from fastload.testing.proxy import FaultyProxy
from old_shard_index import to_version_3

pytest.importorskip("obstore", reason="gs:// and az:// need obstore: pip install '.[cloud]'")


@dataclass
class Store:
    """A running server and how to reach it."""

    scheme: str
    server: Any

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://data/{prefix}"

    def options(self, endpoint: str | None = None, **client: Any) -> dict[str, Any]:
        """Storage options reaching the server (through ``endpoint`` if given), with
        ``client`` added to obstore's client options."""
        options = self.server.options(endpoint)
        options["client_options"] = {**options.get("client_options", {}), **client}
        return options

    def objects(self, prefix: str) -> ObstoreBucket:
        """The objects under ``prefix``, read and written around fastload's own code."""
        return ObstoreBucket(self.url(prefix), options=self.options())


def start(scheme: str) -> Any:
    if scheme == "gs":
        from fastload.testing.gcsserver import LocalGCS, fake_gcs_installed

        if not fake_gcs_installed():
            pytest.skip("fake-gcs-server is not installed: pip install '.[testing]'")
        server = LocalGCS().__enter__()
        server.create_bucket("data")
        return server
    from fastload.testing.azureserver import LocalAzurite, azurite_binary, sdk_installed

    if azurite_binary() is None or not sdk_installed():
        pytest.skip("Azurite is not installed: npm install --prefix .venv azurite, and "
                    "pip install '.[testing]'")  # fmt: skip
    server = LocalAzurite().__enter__()
    server.create_container("data")
    return server


@pytest.fixture(scope="module", params=["gs", "az"])
def store(request):
    server = start(request.param)
    try:
        yield Store(request.param, server)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=3, images_per_class=8, size=(64, 48)
    )


@pytest.fixture(scope="module")
def url(store, folder):
    write_shards(folder, store.url("train"), shard_size=30_000, storage_options=store.options())
    return store.url("train")


def test_a_bucket_reads_back_as_the_folder_does(store, url, folder, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, storage_options=store.options())
    reference = ImageFolder(folder)
    assert len(dataset) == 24 and len(dataset.shards) > 1
    for index in range(len(dataset)):
        image, label = dataset[index]
        assert label == reference[index][1] and np.array_equal(image, reference[index][0])
    listed = store.objects("train").names("")
    assert INDEX in listed and PROGRESS not in listed
    assert [name for name in listed if name.endswith(".tar")] == [s.name for s in dataset.shards]


def test_forked_workers_read_every_sample_once(store, url, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, decode="tensor",
                             storage_options=store.options())  # fmt: skip
    # this process asked the store first (the index): its workers are forked after
    sampler = ShardShuffle(dataset, global_batch_size=4, seed=2, window=2)
    loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                        multiprocessing_context="fork")  # fmt: skip
    labels = torch.cat([labels for _, labels in loader]).tolist()
    assert labels == [dataset[index][1] for index in sampler] and len(labels) == 24


def test_a_shards_member_table_comes_inside_it_or_with_its_download(store, url, folder, tmp_path):
    dataset = ShardedDataset(url, cache_dir=tmp_path, storage_options=store.options())
    transport, shard = dataset.transport, dataset.shards[1]
    assert len(dataset.members(1)) == shard.count  # what a reader asks first: the shard comes
    assert (transport.cache / shard.name).stat().st_size == shard.size  # its table inside
    assert not list(transport.cache.glob("*.idx")) and not list(transport.cache.glob("*.part"))
    first = dataset.shard_range(1)[0]
    reference = ImageFolder(folder)
    image, label = dataset[first]  # read through that table
    assert label == reference[first][1] and np.array_equal(image, reference[first][0])
    # an upgraded older set: each table an object beside its shard, fetched in its download
    beside = tmp_path / "beside"
    write_shards(folder, beside, shard_size=30_000)
    to_version_3(beside)
    objects = store.objects("beside")
    for path in sorted(beside.iterdir()):
        objects.write(path.name, path)
    dataset = ShardedDataset(store.url("beside"), cache_dir=tmp_path / "cache",
                             storage_options=store.options())  # fmt: skip
    transport, shard = dataset.transport, dataset.shards[1]
    table = transport.table(shard)
    assert (transport.cache / shard.name).is_file()
    assert (transport.cache / f"{shard.name}.idx").read_bytes() == table
    assert transport.node.checked_hash(f"{shard.name}.idx") == shard.table_sha256
    assert not list(transport.cache.glob("*.part"))  # the table's own part file entered
    image, label = dataset[first]
    assert label == reference[first][1] and np.array_equal(image, reference[first][0])


@pytest.mark.parametrize("url", ["gs://", "ftp://host/set", "gs:///set"])
def test_a_url_a_store_cannot_reach_is_refused_naming_it(url):
    with pytest.raises(ValueError, match=rf"^{re.escape(url)}: not a URL of a store reached "
                       r"through obstore \(gs://, az://, https://, http://, s3://\)$"):  # fmt: skip
        ObstoreBucket(url)
    from fastload.shards.stores.s3 import S3Bucket

    with pytest.raises(ValueError, match=rf"^{re.escape(url)}: not an s3://bucket/prefix URL$"):
        S3Bucket(url)


def test_a_web_server_url_is_read_only():
    with pytest.raises(PermissionError, match="a web server's shards are read-only"):
        write_shards([], "https://example.com/set")


@pytest.mark.slow
def test_an_epoch_through_slow_downs_cut_bodies_and_stalls_is_exact(
    store, url, folder, tmp_path, monkeypatch
):
    from fastload.shards.stores import obstore_bucket

    monkeypatch.setattr(obstore_bucket, "CHUNK", 4096)  # many ranged GETs a shard: many faults
    # every 4th request a 503, every 5th body cut in half, every 7th stalled past the
    # timeout, every 31st with a byte changed: obstore retries the requests, fastload the
    # bodies, and the shards that fail their hash
    upstream = store.server.endpoint.removesuffix("/devstoreaccount1")
    with FaultyProxy(upstream, slow_down=4, truncate=5, stall=7, stall_s=1.5,
                     corrupt=31) as proxy:  # fmt: skip
        options = store.options(proxy.endpoint, timeout=1, connect_timeout=1)
        dataset = ShardedDataset(url, cache_dir=tmp_path, storage_options=options)
        reference = ImageFolder(folder)
        order = list(ShardShuffle(dataset, global_batch_size=4, seed=3, window=2))
        for index in order:
            image, label = dataset[index]
            assert label == reference[index][1] and np.array_equal(image, reference[index][0])
        dataset.verify()  # the cache holds what was written; the member tables too
        # stalls are asked again, within the budget (whether a hedge wins is the clock's):
        # 5 % of a store process's requests, the first hedge allowed at once, and up to
        # `parallel` store processes downloading ahead
        counts = dataset.transport.bucket.hedge_counts
        assert counts["requests"] > 0
        assert counts["hedged"] <= 0.05 * counts["requests"] + dataset.transport.bucket.parallel
    assert len(order) == 24 and sorted(order) == list(range(24))
    assert all(proxy.counts[fault] for fault in ("slow_down", "truncate", "stall", "corrupt"))


@pytest.mark.slow
def test_a_killed_upload_resumes_without_uploading_finished_shards_again(store, folder, tmp_path):
    options = store.options()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERSION, str(folder), store.url("killed"),
         json.dumps(options)],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    objects = store.objects("killed")
    uploaded = objects.names("")
    finished = {name: objects.read(name) for name in uploaded if name.endswith(".tar")}
    assert finished and PROGRESS in uploaded and INDEX not in uploaded
    with pytest.raises(ShardIndexError, match="conversion did not finish"):
        ShardedDataset(store.url("killed"), cache_dir=tmp_path, storage_options=options)
    with pytest.raises(FileExistsError, match="pass resume=True"):
        write_shards(ImageFolder(folder, decode="numpy"), store.url("killed"),
                     storage_options=options)  # fmt: skip
    stamps = {name: objects.version(name) for name in finished}
    time.sleep(1.1)  # a new upload would carry a later stamp
    write_shards(ImageFolder(folder, decode="numpy"), store.url("killed"), shard_size=20_000,
                 resume=True, storage_options=options)  # fmt: skip
    assert {name: objects.version(name) for name in finished} == stamps
    after = objects.names("")
    assert PROGRESS not in after and INDEX in after
    write_shards(ImageFolder(folder, decode="numpy"), tmp_path / "whole", shard_size=20_000)
    resumed = ShardedDataset(store.url("killed"), cache_dir=tmp_path / "c", storage_options=options)
    whole = ShardedDataset(tmp_path / "whole")
    assert [shard.sha256 for shard in resumed.shards] == [shard.sha256 for shard in whole.shards]


def test_info_and_verify_take_an_azure_url_from_the_environment(
    store, url, tmp_path, monkeypatch, capsys
):
    if store.scheme != "az":
        pytest.skip("the GCS server's address comes in a service account file, not a variable")
    from fastload.tools.cli import main

    for name, value in store.server.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))  # the default cache, under ~/.cache/fastload
    main(["info", url])
    described = json.loads(capsys.readouterr().out)
    assert described["samples"] == 24 and described["shards"] >= 2
    main(["verify", url])
    assert capsys.readouterr().out == f"{url}: {described['shards']} shards, 24 samples verified\n"


#: A script reading every sample of the store's set ``sys.argv[1]`` (cache ``sys.argv[2]``,
#: storage options in JSON ``sys.argv[3]``), its dataset (and the dataset's ObstoreBucket
#: with its store processes) a global of the main module, which keeps itself and fastload's
#: modules: both are let go only when the interpreter clears the modules' globals at exit.
READ_TO_THE_END = """
import json
import sys
import __main__
import fastload.shards

dataset = fastload.shards.ShardedDataset(
    sys.argv[1], cache_dir=sys.argv[2], storage_options=json.loads(sys.argv[3])
)
labels = [dataset[index][1] for index in range(len(dataset))]
print(len(labels))
itself = __main__
"""


@pytest.mark.slow
def test_a_script_that_read_a_store_exits_without_a_word_on_stderr(store, url, tmp_path):
    outcome = script_outcome(READ_TO_THE_END, url, str(tmp_path), json.dumps(store.options()))
    assert outcome == (0, "24\n", "")
