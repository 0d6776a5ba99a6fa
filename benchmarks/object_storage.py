"""Streaming a shard set from object storage: fastload's ShardedDataset against the raw
rate of parallel GETs, against the same samples on local disk, and against the streaming
loaders people use, on a real S3 server started here (OpenStack Swift's S3 API; with
``--store gs`` or ``az``, fake-gcs-server or Azurite, the peers left out).

The data: ``--images`` photo-like 500x375 JPEGs in shards of ``--shard-size`` bytes,
uploaded to a bucket. Each timed pass reads every sample's encoded bytes and label (no
decoding: the question is the I/O), with ``--workers`` DataLoader workers or the peer's
equivalent:

- raw parallel GETs: every shard fetched whole by ``--parallel`` GETs at once (boto3 for
  S3, obstore for the others), nothing else (the ceiling a reader of this server reaches here);
- fastload, cold: ShardedDataset on the bucket in ShardShuffle's order through
  FastLoader, its cache emptied before each pass;
- fastload, warm: the same, the cache filled by the pass before (``WARM_EPOCHS`` epochs
  a timed pass: one is shorter than the noise here);
- fastload, local disk: ShardedDataset on the shard folder (as many epochs);
- MosaicML Streaming, litdata, WebDataset, Ray Data: each reads the same samples from the
  same server, cold, in its own format where it has one (written and uploaded before the
  rounds, untimed) and its own usual way; see lib/streaming_peers.py. A peer that is not
  installed, or fails, says why in its row; one that reads other samples than the shards
  hold says so in its note.

Rounds are interleaved after a warm-up round; medians; CPU ms per sample (this process
and its workers; for the peers, every process under this one, as Ray's workers are its
raylet's children; every row counts the local S3 server's processes, and Ray's runtime,
up through all rounds, while it idles), and the server's processes' share of it a column
of its own (the reader's is the rest, less the delay programs' behind a link).

The server runs behind a link with a cloud's latency and bandwidth
(:mod:`benchmarks.lib.shaped_link`: a namespace of its own, the rate each way, the delay
on each receiving side), a run and a result file per link: by default 40 ms / 400 Mbit/s
and 20 ms / 600 Mbit/s;
``--link RTT_MS,RATE ...`` names others, ``--link none`` the loopback. Each link's run:
the raw GETs at each ``--parallel`` count, the fastest the baseline, their MB/s and
share of the link in the summary (below 90 % of it, the pass is still CPU-bound here);
fastload cold with the depth that follows the link (the default row; the depth it
reached in the summary) and at each fixed ``--download-ahead`` depth; the delay programs'
CPU per sample a column of its own. Where shaping is not permitted here (not root, no
namespaces, no iptables), one run on the loopback says why, and the links are not measured.

Usage:
    python benchmarks/object_storage.py [--store s3|gs|az] [--images 8000]
        [--shard-size 8MB] [--workers 2] [--parallel 8 16 32] [--download-ahead 8 16]
        [--link 40,400mbit 20,600mbit | none] [--rounds 5] [--out DIR] [--plot] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, describe, interleaved, plot, report, results_folder
from benchmarks.lib.data import DATA, jpeg_folder
from benchmarks.lib.shaped_link import ShapedLink, parse_link, rate_bits, why_not
from benchmarks.lib.streaming_peers import (
    PEERS,
    Bench,
    cpu_seconds_of,
    cpu_seconds_of_tree,
    expected,
    sizes,
    timed,
)
from fastload import FastLoader
from fastload.shards import ShardedDataset, ShardShuffle, write_shards
from fastload.testing.proxy import ProxyProcess
from fastload.testing.s3server import LocalS3, swift_installed
from fastload.tools.measure import Measurement

#: Epochs a warm or local-disk pass reads: one is a fraction of a second here, shorter
#: than the machine's noise between rounds.
WARM_EPOCHS = 5


def epoch_of(dataset: ShardedDataset, args, epochs: int = 1) -> Callable[[], dict[str, float]]:
    """A timed pass of ``epochs`` epochs through FastLoader (its ``epochs`` kept in the
    result: its samples, bytes and labels are that many epochs')."""
    sampler = ShardShuffle(dataset, global_batch_size=args.batch_size, seed=0, window=4)
    loader = FastLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        collate_fn=sizes,
        persistent_workers=False,
    )  # fmt: skip  (a cold pass starts cold)
    return lambda: timed(lambda: itertools.chain.from_iterable(
        loader for _ in range(epochs))) | {"epochs": epochs}  # fmt: skip


def cold(
    dataset: ShardedDataset, cache: Path, args, hedging: bool = True
) -> Callable[[], dict[str, float]]:
    """A pass from an emptied cache; with ``hedging=False``, no ranged GET asked twice."""
    read_all = epoch_of(dataset, args)

    def run() -> dict[str, float]:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        dataset.transport.bucket.hedging = hedging  # the workers fork with it
        try:
            return read_all()
        finally:
            dataset.transport.bucket.hedging = True

    return run


class Store:
    """The server of ``--store`` on 127.0.0.1, or behind ``link``, with the bucket
    ``bench``: where its shards go and the storage options that reach it."""

    def __init__(self, scheme: str, stack: ExitStack, link: ShapedLink | None = None) -> None:
        self.scheme = scheme
        behind = {} if link is None else {"host": link.server_address, "launch": link.inside}
        if scheme == "s3":
            import boto3

            self.server = stack.enter_context(LocalS3(**behind))
            boto3.client("s3", **self.server.client_options()).create_bucket(Bucket="bench")
        elif scheme == "gs":
            from fastload.testing.gcsserver import LocalGCS

            self.server = stack.enter_context(LocalGCS(**behind))
            self.server.create_bucket("bench")
        else:
            from fastload.testing.azureserver import LocalAzurite

            self.server = stack.enter_context(LocalAzurite(**behind))
            self.server.create_container("bench")
        self.url = f"{scheme}://bench/shards"
        #: where a proxy in front of it forwards to (Azure's account is in the path)
        self.upstream = self.server.endpoint.removesuffix("/devstoreaccount1")

    def options(self, endpoint: str | None = None, timeout_s: float | None = None) -> dict:
        """Storage options reaching the server (through a proxy at ``endpoint``), with a
        read timeout of ``timeout_s``."""
        if self.scheme == "s3":
            from botocore.config import Config

            options = self.server.client_options()
            if endpoint:
                options["endpoint_url"] = endpoint
            if timeout_s:
                options["config"] = Config(read_timeout=timeout_s, connect_timeout=timeout_s)
            return options
        options = self.server.options(endpoint)
        if timeout_s:
            client = options.get("client_options", {})
            options["client_options"] = {**client, "timeout": timeout_s,
                                         "connect_timeout": timeout_s}  # fmt: skip
        return options

    @property
    def transport(self):
        """The module whose CHUNK sets the bytes per ranged GET."""
        from fastload.shards.stores import obstore_bucket, s3

        return s3 if self.scheme == "s3" else obstore_bucket


def proxied(
    store: Store, cache: Path, args, stack: ExitStack, hedging: bool = True, **faults: float
) -> Callable[[], dict[str, float]]:
    """The cold pass through a loopback proxy (``FaultyProxy``, injecting ``faults``), with
    ranged GETs of ``--fault-chunk`` bytes (enough requests for 1 % to happen) and a
    1 s read timeout. The proxy runs in a process of its own (``ProxyProcess``): its
    copying takes no turns of the measured loader's interpreter lock."""
    proxy = stack.enter_context(ProxyProcess(store.upstream, **faults))
    options = store.options(proxy.endpoint, timeout_s=1)
    dataset = ShardedDataset(store.url, decode=None, cache_dir=cache, storage_options=options)
    read_all = cold(dataset, cache, args, hedging)
    module = store.transport

    def run() -> dict[str, float]:
        chunk, module.CHUNK = module.CHUNK, args.fault_chunk  # the workers fork with it
        try:
            return read_all()
        finally:
            module.CHUNK = chunk

    run.proxy = proxy  # type: ignore[attr-defined]
    run.dataset = dataset  # type: ignore[attr-defined]
    return run


#: --store -> the server it starts, in the result's settings.
SERVERS = {"s3": "OpenStack Swift s3api", "gs": "fake-gcs-server", "az": "Azurite (blob)"}

#: 10 % of requests answered 503 SlowDown, 1 % of bodies cut short, 1 % with a byte
#: changed, 1 % stalled 30 s (every n-th request: n not multiples of one another)
FAULTS = {"slow_down": 10, "truncate": 99, "corrupt": 101, "stall": 103, "stall_s": 30.0}


def hedges(run: Callable[[], dict[str, float]]) -> dict[str, int]:
    """The hedged reads of a proxied pass's dataset, in this process."""
    return run.dataset.transport.bucket.hedge_counts  # type: ignore[attr-defined]


def cold_runs(dataset: ShardedDataset, cache: Path, args, truth: dict[str, int]) -> dict:
    """``--cold-runs`` cold passes in a row, forked workers each time: the longest wait
    for a batch and the passes that read other bytes or labels than the shards hold."""
    passes = [cold(dataset, cache, args)() for _ in range(args.cold_runs)]
    return {
        "runs": len(passes),
        "longest_wait_s": max(run["longest_wait"] for run in passes),
        "wrong": sum(any(run[key] != truth[key] for key in truth) for run in passes),
    }


def obstore_on_s3(store: Store, cache: Path, args) -> dict[str, Callable[[], dict[str, float]]]:
    """On S3, the cold pass through obstore (``ObstoreBucket``, in its store process) too,
    beside boto3's (``S3Bucket``, fastload's S3 client): which is faster here."""
    if store.scheme != "s3" or importlib.util.find_spec("obstore") is None:
        return {}  # not installed: boto3's pass alone
    from fastload.shards.stores.cached import CachedShards
    from fastload.shards.stores.obstore_bucket import ObstoreBucket

    boto3_names = store.options()
    options = {"endpoint": boto3_names["endpoint_url"], "region": boto3_names["region_name"],
               "access_key_id": boto3_names["aws_access_key_id"],
               "secret_access_key": boto3_names["aws_secret_access_key"]}  # fmt: skip
    transport = CachedShards(ObstoreBucket(store.url, options=options), cache_dir=cache)
    transport.index()  # the cache's namespace, as ShardedDataset sets its transport's
    dataset = ShardedDataset(store.url, decode=None, cache_dir=cache, storage_options=boto3_names)
    dataset.transport = transport
    return {"fastload, cold cache, obstore client": cold(dataset, cache, args)}


def raw_gets(
    store: Store, dataset: ShardedDataset, parallel: int
) -> Callable[[], dict[str, float]]:
    """Every shard fetched whole, ``parallel`` at once, by the store's client (boto3 for
    S3, obstore for the others) in this process."""
    if store.scheme == "s3":
        import boto3
        from botocore.config import Config

        connections = Config(max_pool_connections=max(10, parallel))
        client = boto3.client("s3", **store.options(), config=connections)

        def fetch(name: str) -> int:
            return len(client.get_object(Bucket="bench", Key=f"shards/{name}")["Body"].read())
    else:
        import obstore
        from obstore.store import from_url

        from fastload.shards.stores.obstore_bucket import store_options
        from fastload.shards.stores.obstore_process import options_for_obstore

        options = options_for_obstore(store_options(store.url, store.options()))
        client = from_url(store.url, **options)

        def fetch(name: str) -> int:
            return len(obstore.get(client, name).bytes())

    names = [shard.name for shard in dataset.shards]

    def run() -> dict[str, float]:
        cpu, start = cpu_seconds_of_tree(), time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(fetch, names))
        return {"seconds": time.perf_counter() - start,
                "cpu": cpu_seconds_of_tree() - cpu, "samples": len(dataset)}  # fmt: skip

    return run


def peer_passes(
    store: Store, shards: Path, work: Path, args, stack: ExitStack
) -> tuple[dict[str, Callable[[], dict[str, float]]], dict[str, str]]:
    """Each peer's pass, set up (its data written and uploaded), or why it has none."""
    passes, notes = {}, {}
    if store.scheme != "s3":
        return passes, dict.fromkeys(PEERS, "not run: the peers run against the S3 server")
    server = store.server
    for name, peer in PEERS.items():
        if (why := peer.unavailable()) is not None:
            notes[name] = why
            continue
        folder = work / peer.module.replace(".", "-")
        folder.mkdir(parents=True)
        bench = Bench(server, shards, folder, args.batch_size, args.workers, args.shard_size,
                      stack)  # fmt: skip
        try:
            passes[name] = peer.reader(bench)
        except Exception as error:  # one peer's failure must not cost the others
            traceback.print_exc()
            notes[name] = f"setup failed: {describe(error)}"
    return passes, notes


def counting_parts(run: Callable[[], dict[str, float]], store: Store, link: ShapedLink | None):
    """``run``, which also counts the CPU seconds the server's processes spent in it, and
    those of the link's delay programs (the pass's CPU split by process)."""
    parts = {"server_cpu": lambda: cpu_seconds_of(store.server.pids)}
    if link is not None:
        parts["delay_cpu"] = link.delay_cpu_seconds

    def counted() -> dict[str, float]:
        before = {name: seconds() for name, seconds in parts.items()}
        result = run()
        return result | {name: seconds() - before[name] for name, seconds in parts.items()}

    return counted


def link_summary(link: ShapedLink | str | None, rows: list[Row], shard_bytes: int) -> dict:
    """The link, and each raw pass's rate in MB/s and as a share of it."""
    if link is None:
        return {"link": "none: loopback, the server on this machine's cores"}
    if isinstance(link, str):
        return {"link": link}
    capacity = rate_bits(link.rate) / 8 / 1e6
    raw = {}
    for row in rows:
        if row.name.startswith("raw") and row.measurement is not None:
            rate = shard_bytes / row.measurement.median / 1e6
            share = rate / capacity
            raw[row.name] = {"MB/s": round(rate, 1), "share of the link": round(share, 2)}
            if share < 0.9:
                raw[row.name]["note"] = "below 90 % of the link: still CPU-bound here"
    return {"link": {"rtt_ms": link.rtt_ms, "rate": link.rate, "MB/s": capacity},
            "raw GETs": raw}  # fmt: skip


def row_of(name: str, runs: list[dict[str, float]], truth: dict[str, int] | None = None) -> Row:
    """A measured row; with ``truth`` (an epoch's), a note where a pass read other
    samples than that many epochs of it."""
    seconds = Measurement(tuple(run["seconds"] for run in runs))
    cpu = sorted(run["cpu"] for run in runs)[len(runs) // 2]
    extra = {"CPU ms/sample": f"{1000 * cpu / runs[0]['samples']:.3f}"}
    for part, column in (("server_cpu", "server"), ("delay_cpu", "delay")):
        if part in runs[0]:
            spent = sorted(run[part] for run in runs)[len(runs) // 2]
            extra[f"{column} CPU ms/sample"] = f"{1000 * spent / runs[0]['samples']:.3f}"
    wrong = [f"{run[key]:g} {key}" for run in runs for key in truth or {}
             if run[key] != truth[key] * run.get("epochs", 1)]  # fmt: skip
    epochs = int(runs[0].get("epochs", 1))
    note = (f"read {', '.join(wrong)} in {epochs} epoch(s); an epoch of the shards holds "
            f"{truth}" if wrong else None)  # fmt: skip
    versus = ("fastload, local disk" if "warm" in name
              else "fastload, cold cache, via the proxy" if "faults" in name else None)  # fmt: skip
    return Row(name, seconds, int(runs[0]["samples"]), extra, versus=versus,
               note=note)  # fmt: skip


#: The links a run measures unless ``--link`` names others: a long, thinner one and a
#: shorter, fatter one (600 Mbit/s, not 1 Gbit/s: the raw GETs fill this much of a link
#: on two cores, and a link they do not fill measures the CPU, not the link).
LINKS = ("40,400mbit", "20,600mbit")


def link_argument(text: str) -> tuple[float, str] | None:
    """``--link`` item: ``RTT_MS,RATE``, or ``none`` (loopback)."""
    return None if text == "none" else parse_link(text)


def measure(args, folder: Path, wanted: tuple[float, str] | None, why: str | None) -> None:
    """Every pass over ``wanted`` (``(rtt_ms, rate)``; None: loopback; ``why`` it cannot
    be shaped here), its table, its result file and its plot."""
    work = Path(tempfile.mkdtemp(prefix="fastload-object-storage-"))
    link: ShapedLink | str | None = None
    try:
        local = work / "shards"
        write_shards(folder, local, shard_size=args.shard_size)
        with ExitStack() as servers:
            if wanted is not None:
                link = (f"not shaped ({why}): loopback" if why is not None
                        else servers.enter_context(ShapedLink(*wanted)))  # fmt: skip
            store = Store(args.store, servers, link if isinstance(link, ShapedLink) else None)
            options = store.options()
            # the same shards as the local set (files kept byte for byte), as a user writes
            write_shards(folder, store.url, shard_size=args.shard_size, storage_options=options)
            remote = ShardedDataset(store.url, decode=None, cache_dir=work / "cache",
                                    storage_options=options)  # fmt: skip
            unhedged = ShardedDataset(store.url, decode=None, cache_dir=work / "unhedged-cache",
                                      storage_options=options)  # fmt: skip
            on_disk = ShardedDataset(local, decode=None)
            truth = expected(local)
            # the default row's depth follows the link; the others fixed, named by their depth
            depths = {
                depth: ShardedDataset(store.url, decode=None, cache_dir=work / f"cache-{depth}",
                                      storage_options=options, download_ahead=depth)
                for depth in args.download_ahead
            }  # fmt: skip
            with ExitStack() as stack:  # what a peer started (Ray) stops before the server
                faults = proxied(store, work / "faulty-cache", args, stack, **FAULTS)
                variants = {
                    **{f"raw parallel GETs ({parallel} at once)": raw_gets(store, on_disk, parallel)
                       for parallel in args.parallel},
                    "fastload, cold cache": cold(remote, work / "cache", args),
                    **{f"fastload, cold cache, download_ahead={depth}": cold(
                        dataset, work / f"cache-{depth}", args)
                       for depth, dataset in depths.items()},
                    "fastload, cold cache, no hedging": cold(
                        unhedged, work / "unhedged-cache", args, hedging=False
                    ),
                    **obstore_on_s3(store, work / "obstore-cache", args),
                    "fastload, warm cache": epoch_of(remote, args, WARM_EPOCHS),
                    "fastload, local disk": epoch_of(on_disk, args, WARM_EPOCHS),
                    "fastload, cold cache, via the proxy": proxied(
                        store, work / "proxied-cache", args, stack
                    ),
                    "fastload, cold cache, via the proxy, faults injected": faults,
                    "fastload, cold cache, via the proxy, faults injected, no hedging": proxied(
                        store, work / "unhedged-faulty-cache", args, stack, hedging=False,
                        **FAULTS,
                    ),
                }  # fmt: skip
                passes, notes = peer_passes(store, local, work / "peers", args, stack)
                shaped = link if isinstance(link, ShapedLink) else None
                timed_passes = {name: counting_parts(run, store, shaped)
                                for name, run in (variants | passes).items()}  # fmt: skip
                results = interleaved(timed_passes, rounds=args.rounds)
                summary = {
                    "faults injected": FAULTS | dict(faults.proxy.counts),  # type: ignore[attr-defined]
                    # the downloads ahead run in the loader's process: most of the requests
                    "hedged reads in the faults pass, the loader's process": hedges(faults),
                    "cold runs": cold_runs(remote, work / "cache", args, truth),
                    # the default row's: where following the link led it
                    "download depth reached, shards": remote.download_depth,
                }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, runs in results.items():
        if isinstance(runs, str):
            rows.append(Row(name, None, args.images, note=runs))
        else:
            rows.append(row_of(name, runs, None if name.startswith("raw") else truth))
    rows += [Row(name, None, args.images, note=note) for name, note in notes.items()]
    rows.sort(key=lambda row: list(variants | PEERS).index(row.name))
    raw = [row for row in rows if row.name.startswith("raw") and row.per_second is not None]
    baseline = (  # the best raw rate; with none measured, the first raw row says why
        max(raw, key=lambda row: row.per_second or 0.0).name
        if raw
        else f"raw parallel GETs ({args.parallel[0]} at once)"
    )
    summary |= link_summary(link, rows, sum(shard.size for shard in on_disk.shards))
    name = "object_storage" if args.store == "s3" else f"object_storage_{args.store}"
    if isinstance(link, ShapedLink):  # a result of its own per link: loopback's stays
        name += f"_link_{link.rtt_ms:g}ms_{link.rate}"
    result = report(
        name, rows,
        baseline=baseline, unit="samples",
        settings={key: value for key, value in vars(args).items() if key not in ("out", "link")}
        | {"link": None if wanted is None else f"{wanted[0]:g},{wanted[1]}",
           "warm_epochs": WARM_EPOCHS}
        | {"server": SERVERS[args.store] + (
               f" in a namespace of its own, behind a {link.rtt_ms:g} ms, {link.rate} link"
               if isinstance(link, ShapedLink) else " on 127.0.0.1"),
           "data": "500x375 JPEG, bytes only",
           "peers": {name: peer.version() for name, peer in PEERS.items()}},
        out=args.out, summary=summary,
    )  # fmt: skip
    if args.plot:
        plot(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8000)
    parser.add_argument("--shard-size", type=int, default=8 << 20)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--parallel", type=int, nargs="+", default=[8, 16, 32],
        help="GETs at once, raw: a pass each, the fastest the baseline",
    )  # fmt: skip
    parser.add_argument(
        "--download-ahead", type=int, nargs="+", default=[8, 16],
        help="fastload cold at each fixed depth (shards downloaded ahead) too, beside the "
        "default row's depth that follows the link",
    )  # fmt: skip
    parser.add_argument(
        "--link", type=link_argument, nargs="+", default=[parse_link(text) for text in LINKS],
        help="RTT_MS,RATE each: the server behind a shaped link, a run (and a result) per "
        f"link; none: loopback (default: {' '.join(LINKS)})",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--fault-chunk", type=int, default=1 << 20,
                        help="bytes per ranged GET in the faults pass")  # fmt: skip
    parser.add_argument("--cold-runs", type=int, default=20)
    parser.add_argument(
        "--store", choices=["s3", "gs", "az"], default="s3",
        help="the server: S3 (OpenStack Swift), Google Cloud Storage (fake-gcs-server), "
        "Azure (Azurite); the peers run against S3 only",
    )  # fmt: skip
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.shard_size, args.rounds, args.batch_size = 40, 200_000, 1, 8
        args.fault_chunk, args.cold_runs = 50_000, 2
    if args.store == "s3" and (not swift_installed() or importlib.util.find_spec("boto3") is None):
        raise SystemExit(
            "object_storage.py needs OpenStack Swift and boto3: pip install swift boto3"
        )
    shaped = [link for link in args.link if link is not None]
    why = why_not() if shaped else None
    # where no link can be shaped, the links are one loopback run that says why
    links = args.link if why is None else [shaped[0]]

    # a signal unwinds the set-up as an error does: the link and the servers torn down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    folder = jpeg_folder(DATA / f"jpeg-{args.images}", max(1, args.images // 10))
    for link in links:
        measure(args, folder, link, why)


if __name__ == "__main__":
    main()
