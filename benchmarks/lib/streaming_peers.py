"""The peers of benchmarks/object_storage.py: each reads the benchmark's samples (every JPEG's
bytes and its label, nothing decoded) from the same local S3 server, cold, with the same
parallelism, in its own usual way. Writing a peer's own format, uploading it and starting
its runtime are setup, not timed.

- WebDataset: our tar shards themselves, as http URLs presigned for the server, which
  WebDataset opens with its http handler (curl); ``shardshuffle=100`` (what ``True``
  means), a shuffle buffer of 1000 samples, shards split by worker, batches in its
  WebLoader (a DataLoader) with ``--workers``; without a ``cache_dir`` it caches nothing.
- MosaicML Streaming: the samples written by ``MDSWriter`` (``jpg`` bytes, ``cls`` int,
  shards of ``--shard-size``) and uploaded under ``s3://bench/mds``; a new
  ``StreamingDataset`` per pass, its local cache emptied and its shared memory cleaned
  first and freed after, in a DataLoader with ``--workers``; the endpoint from
  ``S3_ENDPOINT_URL``. One fix: the S3 client that fetched its index is dropped before
  the workers fork (see ``_drop_client``).
- litdata: the samples written by its ``BinaryWriter`` (what ``litdata.optimize`` runs;
  chunks of ``--shard-size``) and uploaded under ``s3://bench/litdata``; a new
  ``StreamingDataset`` per pass on an emptied cache, the endpoint in its
  ``storage_options``, in its ``StreamingDataLoader`` with ``--workers``. One fix: its
  obstore client is let use plain http, which the local server speaks.
- Ray Data: ``read_webdataset`` of our tar shards through pyarrow's ``S3FileSystem``, no
  decoder, files shuffled, on a local Ray of ``--workers`` CPUs started in setup, read
  with ``iter_batches``; it keeps nothing between passes. Its runtime stays up through
  all rounds, as in a job that uses it: idle, it costs about 20 ms CPU a second, which
  the other rows' CPU figures include (its raylet is this process's child).

Each pass counts the samples, JPEG bytes and the sum of the labels it read (checked
against the shards), and the CPU seconds of this process and of every process under it
(Ray's workers are its raylet's children). ``bash benchmarks/install_peers.sh`` installs
them beside fastload's pins (MosaicML Streaming without its own: it pins numpy<2.2 and
transformers<5).
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import logging
import os
import resource
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastload.testing.s3server import LocalS3

Pass = Callable[[], dict[str, float]]
Batches = Iterable[Iterable[tuple[int, Any]]]  # (JPEG size, label) pairs, batch by batch
BUCKET = "bench"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Bench:
    """What every peer's reader is given: the server, our shard folder (uploaded under
    ``s3://bench/shards``), a scratch folder of its own, the benchmark's sizes, and a
    stack for what is to be stopped at the end."""

    server: LocalS3
    shards: Path
    work: Path
    batch_size: int
    workers: int
    shard_size: int
    stack: ExitStack


def tar_samples(folder: Path) -> Iterator[tuple[bytes, int]]:
    """The (JPEG bytes, label) of every sample in the shard folder, in order."""
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as tar:
            members: dict[str, dict[str, bytes]] = {}
            for info in tar:
                key, _, extension = info.name.partition(".")
                file = tar.extractfile(info)
                members.setdefault(key, {})[extension] = file.read() if file else b""
        for sample in members.values():
            yield sample["jpg"], int(sample["cls"])


def expected(folder: Path) -> dict[str, int]:
    """What a full pass over the shard folder reads: see ``timed``."""
    samples = size = labels = 0
    for jpeg, label in tar_samples(folder):
        samples, size, labels = samples + 1, size + len(jpeg), labels + label
    return {"samples": samples, "bytes": size, "labels": labels}


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``, thread by thread: a thread that ends meanwhile
    costs only its own list (``procstats.children`` loses them all then)."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # gone
        return []
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds_of_tree() -> float:
    """CPU seconds of this process, of its finished children and of every live process
    under it with the children each of those has finished (Ray's workers are
    grandchildren)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime
    return total + cpu_seconds_of(_children(os.getpid()))


def cpu_seconds_of(pids: list[int]) -> float:
    """CPU seconds of the processes ``pids`` and of every live process under them, each
    with the children it has finished (those gone count nothing)."""
    total, pending = 0.0, list(pids)
    while pending:
        pid = pending.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += sum(int(field) for field in fields[11:15]) / _TICK  # u, s, cu, cs time
        pending += _children(pid)
    return total


def timed(batches: Callable[[], Batches]) -> dict[str, float]:
    """One pass: its seconds, CPU seconds, the samples, JPEG bytes and label sum it read,
    and the longest wait for a batch. The writes of the passes before are on disk first:
    the kernel's writeback of another pass's downloads is not charged to this one."""
    os.sync()
    cpu, start = cpu_seconds_of_tree(), time.perf_counter()
    samples = size = labels = 0
    longest, before = 0.0, start
    for batch in batches():
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
        for length, label in batch:
            samples, size, labels = samples + 1, size + int(length), labels + int(label)
    return {"seconds": time.perf_counter() - start, "cpu": cpu_seconds_of_tree() - cpu,
            "samples": samples, "bytes": size, "labels": labels,
            "longest_wait": longest}  # fmt: skip


def sizes(batch: list[tuple[Any, Any]]) -> list[tuple[int, int]]:
    """A batch of (JPEG, label) as (its size, label), in the worker: the bytes are read
    there as a decoder would read them, and only two numbers a sample cross to this
    process (pickled bytes through a pipe would cost more than the download here)."""
    return [(len(jpeg), int(label)) for jpeg, label in batch]


def dict_sizes(batch: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(len(sample["jpg"]), int(sample["cls"])) for sample in batch]


def upload_folder(server: LocalS3, folder: Path, prefix: str) -> None:
    import boto3

    client = boto3.client("s3", **server.client_options())
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            client.upload_file(str(path), BUCKET, key)


def _shard_names(bench: Bench) -> list[str]:
    return sorted(path.name for path in bench.shards.glob("*.tar"))


def webdataset(bench: Bench) -> Pass:
    import boto3
    import webdataset as wds

    client = boto3.client("s3", **bench.server.client_options())
    urls = [
        client.generate_presigned_url(
            "get_object", Params={"Bucket": BUCKET, "Key": f"shards/{name}"}, ExpiresIn=86400
        )
        for name in _shard_names(bench)
    ]
    dataset = (
        wds.WebDataset(urls, shardshuffle=100, workersplitter=wds.split_by_worker)
        .shuffle(1000)
        .to_tuple("jpg", "cls")
        .batched(bench.batch_size, collation_fn=sizes, partial=True)
    )
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=bench.workers)
    return lambda: timed(lambda: loader)


def mosaic(bench: Bench) -> Pass:
    import torch.utils.data

    mds = importlib.import_module("streaming")
    util = importlib.import_module("streaming.base.util")
    folder, cache = bench.work / "mds", bench.work / "mds-cache"
    columns = {"jpg": "bytes", "cls": "int"}
    with mds.MDSWriter(out=str(folder), columns=columns, size_limit=bench.shard_size) as writer:
        for jpeg, label in tar_samples(bench.shards):
            writer.write({"jpg": jpeg, "cls": label})
    upload_folder(bench.server, folder, "mds")
    # its only way to the server, for this process and its workers (fastload's and the
    # raw GETs' clients are given theirs, which win over these)
    os.environ.update(bench.server.environment(), S3_ENDPOINT_URL=bench.server.endpoint)

    def run() -> dict[str, float]:
        util.clean_stale_shared_memory()
        shutil.rmtree(cache, ignore_errors=True)
        dataset = mds.StreamingDataset(remote=f"s3://{BUCKET}/mds", local=str(cache),
                                       batch_size=bench.batch_size, shuffle=True)  # fmt: skip
        for stream in dataset.streams:  # see _drop_client
            _drop_client(stream)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=bench.batch_size, num_workers=bench.workers, collate_fn=dict_sizes
        )
        try:
            return timed(lambda: loader)
        finally:
            _release_mosaic(dataset._shm_prefix_int)

    return run


def _drop_client(stream: Any) -> None:
    """Forget the S3 client the stream fetched its index with, so that each DataLoader
    worker makes its own: forked workers that inherit it share its keep-alive connection,
    and then wait out its 60 s read timeout, or store another worker's shard under this
    one's name (an IndexError later)."""
    stream._downloader.clean_up()
    gc.collect()  # closes its connection before the fork


def _release_mosaic(prefix: int) -> None:
    """Free what a finished StreamingDataset leaves: its shared memory, kept until exit
    (an ``atexit`` handler holds it), and its file locks in the temporary folder, kept for
    good; they make the next dataset take the next prefix, where
    ``clean_stale_shared_memory`` (which stops at the first free prefix) misses them."""
    shared_memory = importlib.import_module("streaming.base.shared.memory").SharedMemory
    gc.collect()
    for thing in gc.get_objects():
        # type(), not isinstance(): a lazy module among them warns when asked its __class__
        if type(thing) is shared_memory and thing.shm.name.lstrip("/")[:7] == f"{prefix:06d}_":
            thing.cleanup()  # unlinked, and no longer the resource tracker's to warn about
    for lock in Path(tempfile.gettempdir()).glob(f"{prefix:06d}_*_filelock"):
        lock.unlink(missing_ok=True)


def litdata(bench: Bench) -> Pass:
    import litdata as ld
    from litdata.streaming.writer import BinaryWriter

    folder, cache = bench.work / "litdata", bench.work / "litdata-cache"
    # what litdata.optimize runs in each of its workers, here in this process: optimize
    # would make the spawn start method every DataLoader's default, fastload's included
    writer = BinaryWriter(str(folder), chunk_bytes=bench.shard_size)
    for index, (jpeg, label) in enumerate(tar_samples(bench.shards)):
        writer.add_item(index, {"jpg": jpeg, "cls": label})
    writer.done()
    writer.merge()
    upload_folder(bench.server, folder, "litdata")
    # its chunks come through obstore, whose client options litdata fixes without
    # allow_http: no plain-http endpoint otherwise ("HTTP error: builder error")
    downloader = importlib.import_module("litdata.streaming.downloader")
    options = downloader._OBSTORE_CLIENT_OPTIONS
    downloader._OBSTORE_CLIENT_OPTIONS = {**options, "allow_http": "true"}

    def run() -> dict[str, float]:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        dataset = ld.StreamingDataset(f"s3://{BUCKET}/litdata", cache_dir=str(cache),
                                      storage_options=bench.server.client_options(),
                                      shuffle=True)  # fmt: skip
        loader = ld.StreamingDataLoader(
            dataset, batch_size=bench.batch_size, num_workers=bench.workers, collate_fn=dict_sizes
        )
        return timed(lambda: loader)

    return run


def ray_data(bench: Bench) -> Pass:
    import pyarrow.fs
    import ray
    import ray.data

    options = bench.server.client_options()
    # a Ray of its own ("local": not one `ray start` left running), its files in a folder
    # of ours with a short name (its sockets' paths must fit in 107 bytes)
    temporary = tempfile.mkdtemp(prefix="fastload-ray-")
    bench.stack.callback(shutil.rmtree, temporary, ignore_errors=True)
    ray.init(
        address="local", num_cpus=bench.workers, include_dashboard=False, log_to_driver=False,
        logging_level="WARNING", _temp_dir=temporary,
    )  # fmt: skip
    bench.stack.callback(ray.shutdown)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ray.data.DataContext.get_current().enable_progress_bars = False
    filesystem = pyarrow.fs.S3FileSystem(
        access_key=options["aws_access_key_id"], secret_key=options["aws_secret_access_key"],
        region=options["region_name"], scheme="http",
        endpoint_override=bench.server.endpoint.removeprefix("http://"),
    )  # fmt: skip
    paths = [f"{BUCKET}/shards/{name}" for name in _shard_names(bench)]
    dataset = ray.data.read_webdataset(
        paths, filesystem=filesystem, decoder=None, shuffle="files"
    ).map_batches(_ray_sizes, batch_format="numpy")  # in Ray's workers

    def batches() -> Batches:
        for batch in dataset.iter_batches(batch_size=bench.batch_size, batch_format="numpy"):
            yield zip(batch["size"], batch["cls"], strict=True)

    return lambda: timed(batches)


def _ray_sizes(batch: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    return {"size": np.array([len(jpeg) for jpeg in batch["jpg"]]), "cls": batch["cls"]}


@dataclass(frozen=True)
class Peer:
    module: str  # what must import, with ``attribute``, for the peer to run
    attribute: str
    distribution: str  # its package's name, for its version
    reader: Callable[[Bench], Pass]

    def unavailable(self) -> str | None:
        """Why this peer cannot run here, or None."""
        try:
            found = hasattr(importlib.import_module(self.module), self.attribute)
        except ImportError as error:
            if isinstance(error, ModuleNotFoundError) and error.name == self.module.split(".")[0]:
                return "not installed here (bash benchmarks/install_peers.sh)"
            return f"installed but does not import: {type(error).__name__}: {error}"[:300]
        return None if found else f"{self.module} here has no {self.attribute}"

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None


PEERS = {
    "MosaicML Streaming": Peer("streaming", "StreamingDataset", "mosaicml-streaming", mosaic),
    "litdata": Peer("litdata", "StreamingDataset", "litdata", litdata),
    "WebDataset": Peer("webdataset", "WebDataset", "webdataset", webdataset),
    "Ray Data": Peer("ray.data", "read_webdataset", "ray", ray_data),
}  # fmt: skip
