"""Streaming a shard set from object storage: fastload's ShardedDataset against the raw
rate of parallel GETs and against the same samples on local disk, on a real S3 server
started here on 127.0.0.1 (OpenStack Swift's S3 API).

The data: ``--images`` photo-like 500x375 JPEGs in shards of ``--shard-size`` bytes,
uploaded to a bucket. Each timed pass reads every sample's encoded bytes (no decoding:
the question is the I/O), in ShardShuffle's order, through FastLoader with ``--workers``:

- raw parallel GETs: every shard fetched whole by ``--parallel`` boto3 GETs at once,
  nothing else (the ceiling a reader of this server reaches here);
- fastload, cold: ShardedDataset on the bucket, its cache emptied before each pass;
- fastload, warm: the same, the cache filled by the pass before;
- fastload, local disk: ShardedDataset on the shard folder.

MosaicML Streaming, litdata, WebDataset and Ray Data are to read the same samples; for
now each row says whether the peer is installed, and none is measured yet. Rounds are
interleaved after a warm-up round; medians; CPU ms per sample (this process and its
workers).

Usage:
    python benchmarks/streaming.py [--images 2000] [--shard-size 8MB] [--workers 2]
        [--parallel 4] [--rounds 3] [--out DIR] [--plot]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import RESULTS, Row, interleaved, plot, report
from data import DATA, jpeg_folder
from fastload import FastLoader
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.tools.diagnostics.procstats import cpu_seconds_with_workers
from fastload.tools.measure import Measurement
from fastload.tools.s3server import LocalS3, swift_installed

#: Peer -> (module, a name it has, how to install it).
PEERS = {
    "MosaicML Streaming": ("streaming", "StreamingDataset", "pip install mosaicml-streaming"),
    "litdata": ("litdata", "StreamingDataset", "pip install litdata"),
    "WebDataset": ("webdataset", "WebDataset", "pip install webdataset"),
    "Ray Data": ("ray.data", "read_images", "pip install 'ray[data]'"),
}


def installed(module: str, name: str) -> bool:
    """Whether ``module`` imports and has ``name`` (a folder of the same name is not it)."""
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def identity(batch):
    return batch


def epoch_of(dataset: ShardedDataset, args) -> Callable[[], dict[str, float]]:
    sampler = ShardShuffle(dataset, global_batch_size=args.batch_size, seed=0, window=4)
    loader = FastLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        collate_fn=identity,
        persistent_workers=False,
    )  # fmt: skip  (a cold pass starts cold)

    def run() -> dict[str, float]:
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        samples = sum(len(batch) for batch in loader)
        return {"seconds": time.perf_counter() - start,
                "cpu": cpu_seconds_with_workers() - cpu, "samples": samples}  # fmt: skip

    return run


def cold(dataset: ShardedDataset, cache: Path, args) -> Callable[[], dict[str, float]]:
    read_all = epoch_of(dataset, args)

    def run() -> dict[str, float]:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        return read_all()

    return run


def raw_gets(server: LocalS3, dataset: ShardedDataset, args) -> Callable[[], dict[str, float]]:
    import boto3

    client = boto3.client("s3", **server.client_options())

    def fetch(name: str) -> int:
        return len(client.get_object(Bucket="bench", Key=f"shards/{name}")["Body"].read())

    def run() -> dict[str, float]:
        cpu, start = cpu_seconds_with_workers(), time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(fetch, [shard.name for shard in dataset.shards]))
        return {"seconds": time.perf_counter() - start,
                "cpu": cpu_seconds_with_workers() - cpu, "samples": len(dataset)}  # fmt: skip

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--shard-size", type=int, default=8 << 20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4, help="GETs at once, raw")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.shard_size, args.rounds, args.batch_size = 40, 200_000, 1, 8
    if not swift_installed() or importlib.util.find_spec("boto3") is None:
        raise SystemExit("streaming.py needs OpenStack Swift and boto3: pip install swift boto3")

    folder = jpeg_folder(DATA / f"jpeg-{args.images}", max(1, args.images // 10))
    work = Path(tempfile.mkdtemp(prefix="fastload-streaming-"))
    try:
        local = work / "shards"
        write_shards(folder, local, shard_size=args.shard_size)
        with LocalS3() as server:
            import boto3

            boto3.client("s3", **server.client_options()).create_bucket(Bucket="bench")
            from fastload.shards.writer import upload

            upload(local, "s3://bench/shards", options=server.client_options())
            options = server.client_options()
            remote = ShardedDataset("s3://bench/shards", decode=None, cache_dir=work / "cache",
                                    storage_options=options)  # fmt: skip
            on_disk = ShardedDataset(local, decode=None)
            variants = {
                f"raw parallel GETs ({args.parallel} at once)": raw_gets(server, on_disk, args),
                "fastload, cold cache": cold(remote, work / "cache", args),
                "fastload, warm cache": epoch_of(remote, args),
                "fastload, local disk": epoch_of(on_disk, args),
            }
            results = interleaved(variants, rounds=args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, args.images, note=runs))
            continue
        seconds = Measurement(tuple(run["seconds"] for run in runs))
        cpu = sorted(run["cpu"] for run in runs)[len(runs) // 2]
        versus = "fastload, local disk" if "warm" in name else None
        rows.append(Row(name, seconds, int(runs[0]["samples"]),
                        {"CPU ms/sample": f"{1000 * cpu / runs[0]['samples']:.3f}"},
                        versus=versus))  # fmt: skip
    for peer, (module, name, install) in PEERS.items():
        if not installed(module, name):
            rows.append(Row(peer, None, args.images, note=f"not installed here ({install})"))
        else:  # installed, but its reader of this bucket is not written yet
            rows.append(Row(peer, None, args.images, note="installed; not measured yet"))
    result = report(
        "streaming", rows, baseline=f"raw parallel GETs ({args.parallel} at once)",
        unit="samples",
        settings={key: value for key, value in vars(args).items() if key != "out"}
        | {"server": "OpenStack Swift s3api on 127.0.0.1", "data": "500x375 JPEG, bytes only"},
        out=args.out,
    )  # fmt: skip
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
