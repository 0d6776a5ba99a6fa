"""Shuffle quality on a data set written in label order: fastload's ShardShuffle at several
windows, alone and with a group of shards per node, against a true permutation,
WebDataset's usual pipeline and MosaicML Streaming's default (py1e), at several world
sizes. No data is read: every order is computed from sample indices (the real
ShardShuffle, WebDataset's and Streaming's own shuffle and partition functions), then
measured with numpy (about 20 s on one core at full size).

The data set: ``--classes`` x ``--per-class`` samples of ``--sample-kb`` KB, written in
label order into shards of ``--shard-mb`` MiB (ImageNet-1k in 256 MiB shards by default).
Each GPU reads ``--batch-size`` samples a step; the global batch is that times the world
size; ``--gpus-per-node`` GPUs share a node's shard cache of ``--cache-gib``.

Metrics, for one epoch:

- distinct shards per device batch, and per global batch, each as a ratio to the
  permutation's (a proxy for how correlated a batch is when shards hold similar samples);
- bytes downloaded in the epoch by all nodes together, as a ratio to the data set's size,
  each node's cache holding at most ``--cache-gib`` between steps and evicting the shard
  whose next use is furthest (Belady's policy, the best any cache can do), the same with
  least-recently-used eviction (what fastload's cache does), and with no limit (each
  node fetching each shard it reads once: what no cache size saves). WebDataset streams
  each shard once, without a cache: its bytes are those of the shards it reads;
- label distance: the total-variation distance between each device batch's (and each
  global batch's) label histogram and the data set's label distribution, as a ratio to
  the permutation's; and the rate of same-label pairs in a device batch, to the
  permutation's (the TV distance of a batch much smaller than the number of classes is
  close to 1 for every order, so its ratio barely moves: the pair rate does).

The goals (an issue's): distinct shards >= 80% of the permutation's per device batch and
>= 95% per global batch, with <= 1.05x bytes downloaded, and label distance within 1.1x
of the permutation's.

Rows "fastload groups=G window=W", on several nodes, are ShardShuffle with ``groups`` = the
world's number of nodes: each global batch takes ``global batch / G`` samples from each
group's stream, so each node reads only its own group's shards (but for a short tail);
``window`` is then shards per node. On one node, ``groups=1``: the "fastload window=W" rows.

Usage:
    python benchmarks/shuffle_quality.py [--classes 1000] [--per-class 1281]
        [--sample-kb 110] [--shard-mb 256] [--cache-gib 16] [--worlds 1,8,64]
        [--windows 4,8,16,32,64,128] [--group-windows 16,32,64] [--out DIR] [--plot]
        [--smoke]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import machine, pyplot, results_folder, save_figure
from fastload.shards.order import ShardShuffle
from fastload.tools.measure import format_table

GOALS = {"device": 0.80, "global": 0.95, "bytes": 1.05, "label": 1.10}
NOTES = {
    "WebDataset": "bytes: a stream per worker reads each of its shards once, with no cache",
    "Streaming": "its default cache_limit is unlimited: each node keeps every shard it reads "
    "(see bytes, no limit)",
}


# --- the data set ------------------------------------------------------------------------


@dataclass(frozen=True)
class StandInShard:
    count: int  # samples
    size: int  # bytes


@dataclass
class LabelOrdered:
    """What ShardShuffle needs of a ShardedDataset, without files: ``classes`` x
    ``per_class`` samples in label order, ``per_shard`` samples a shard."""

    classes: int
    per_class: int
    per_shard: int
    sample_bytes: int
    shards: list[StandInShard] = field(init=False)
    transport: None = None  # a local folder: nothing fetched

    def __post_init__(self) -> None:
        total = self.classes * self.per_class
        self.starts = [*range(0, total, self.per_shard), total]
        self.shards = [
            StandInShard(end - start, (end - start) * self.sample_bytes)
            for start, end in zip(self.starts, self.starts[1:], strict=False)
        ]
        samples = np.arange(total)
        self.shard_of_sample = samples // self.per_shard
        self.label = samples // self.per_class
        self.label_p = np.full(self.classes, 1 / self.classes)
        self.shard_bytes = np.array([shard.size for shard in self.shards], np.int64)

    def __len__(self) -> int:
        return self.starts[-1]

    def shard_range(self, shard: int) -> range:
        return range(self.starts[shard], self.starts[shard + 1])

    def shard_of(self, index: int) -> int:
        return index // self.per_shard


# --- the orders: each gives (steps, world size, device batch) sample indices ------------


@dataclass(frozen=True)
class World:
    size: int
    batch: int  # per device
    gpus_per_node: int
    workers: int  # DataLoader workers per rank (WebDataset, Streaming)

    @property
    def nodes(self) -> int:
        return math.ceil(self.size / self.gpus_per_node)

    @property
    def ranks_per_node(self) -> int:
        return min(self.size, self.gpus_per_node)

    @property
    def global_batch(self) -> int:
        return self.batch * self.size


def global_batches(order: np.ndarray, world: World) -> np.ndarray:
    """A global order cut into global batches (the last partial one dropped), each rank's
    slice contiguous: what ``ShardShuffle.rank_order`` gives every rank."""
    steps = len(order) // world.global_batch
    return order[: steps * world.global_batch].reshape(steps, world.size, world.batch)


def permutation(data: LabelOrdered, world: World, seed: int, epoch: int) -> np.ndarray:
    order = np.random.default_rng([seed, epoch]).permutation(len(data))
    return global_batches(order, world)


def fastload_order(
    data: LabelOrdered,
    window: int,
    seed: int,
    epoch: int,
    *,
    groups: int = 1,
    global_batch: int = 1,
) -> np.ndarray:
    """fastload's ShardShuffle, the real class: the global order is the same for every
    world size (with ``groups``, for every world size with this global batch)."""
    sampler = ShardShuffle(
        data,
        global_batch_size=global_batch,
        seed=seed,
        window=window,
        groups=groups,
    )
    order = sampler.global_order(epoch)
    return np.fromiter(order, np.int64, len(order))


def webdataset_order(
    data: LabelOrdered, world: World, seed: int, epoch: int, buffer: int, shardshuffle: int
) -> np.ndarray:
    """WebDataset 1.0's pipeline, ``WebDataset(urls, shardshuffle=100,
    nodesplitter=split_by_node).shuffle(1000)`` read by a DataLoader of ``workers`` with
    batches of ``batch``: the shard list split by rank (``urls[rank::world]``) then by
    worker (``[worker::workers]``) in index order, each worker's shards through
    ``filters.shuffle(shardshuffle)``, read in sequence, and its samples through
    ``filters.shuffle(buffer)`` (the real function); a rank's batches are its workers'
    full batches in turn; the epoch stops at the rank with the fewest batches."""
    from webdataset import filters

    ranks = []
    for rank in range(world.size):
        mine = list(range(len(data.shards)))[rank :: world.size]
        batches_of_workers = []
        for worker in range(world.workers):
            rng = random.Random(hash((seed, epoch, rank, worker)))
            urls = iter(mine[worker :: world.workers])
            shards = list(filters.shuffle(shardshuffle, rng=rng)(urls))
            samples = (index for shard in shards for index in data.shard_range(shard))
            stream = np.fromiter(filters.shuffle(buffer, rng=rng)(samples), np.int64)
            full = len(stream) // world.batch
            batches_of_workers.append(stream[: full * world.batch].reshape(full, world.batch))
        turns: list[np.ndarray] = []  # the DataLoader's round robin, skipping workers that are done
        for step in range(max(len(b) for b in batches_of_workers)):
            turns.extend(b[step] for b in batches_of_workers if step < len(b))
        ranks.append(np.array(turns).reshape(-1, world.batch))
    steps = min(len(r) for r in ranks)
    return np.stack([r[:steps] for r in ranks], axis=1)


def streaming_order(
    data: LabelOrdered, world: World, seed: int, epoch: int, block: int | None = None
) -> np.ndarray:
    """MosaicML Streaming's StreamingDataset with its defaults (``shuffle_algo="py1e"``,
    ``partition_algo="relaxed"``, ``num_canonical_nodes`` = the number of nodes,
    ``shuffle_block_size = max(4_000_000 // num_canonical_nodes, 1 << 18)`` unless
    ``block`` is given), from its own ``get_partitions`` and ``get_shuffle``; a rank's
    batch ``k`` is its worker ``k % workers``'s batch ``k // workers`` (a DataLoader's
    round robin)."""
    get_partitions = importlib.import_module("streaming.base.partition").get_partitions
    get_shuffle = importlib.import_module("streaming.base.shuffle").get_shuffle

    canonical = world.nodes
    block = block or max(4_000_000 // canonical, 1 << 18)
    sizes = np.array([shard.count for shard in data.shards], np.int64)
    ids = get_partitions("relaxed", len(data), canonical, world.nodes, world.ranks_per_node,
                         world.workers, world.batch)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shuffle = get_shuffle("py1e", sizes, canonical, seed, epoch, block)
    ids = np.where(ids != -1, shuffle[ids], -1)
    # (nodes, ranks, workers, batches, batch) -> (ranks, batches in DataLoader order, batch)
    ids = ids.transpose(0, 1, 3, 2, 4).reshape(world.size, -1, world.batch).transpose(1, 0, 2)
    complete = (ids >= 0).all(axis=(1, 2))
    return ids[: np.argmin(complete) if not complete.all() else len(ids)]


# --- the metrics -------------------------------------------------------------------------


def distinct_per_row(values: np.ndarray) -> np.ndarray:
    ordered = np.sort(values, axis=1)
    return 1 + np.count_nonzero(ordered[:, 1:] != ordered[:, :-1], axis=1)


def label_measures(labels: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Mean over rows of the TV distance between the row's label histogram and ``p``, and
    the mean rate of same-label pairs in a row."""
    rows, k = labels.shape
    ordered = np.sort(labels, axis=1)
    start = np.ones_like(ordered, dtype=bool)
    start[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    row_of, column = np.nonzero(start)
    flat = row_of * k + column
    counts = np.diff(np.append(flat, rows * k))
    present = ordered[row_of, column]
    overlap = np.bincount(row_of, np.minimum(counts / k, p[present]), minlength=rows)
    pairs = np.bincount(row_of, counts * (counts - 1) / 2, minlength=rows) / (k * (k - 1) / 2)
    return float(np.mean(1 - overlap)), float(np.mean(pairs))


def downloads(
    shard_steps: np.ndarray, shard_bytes: np.ndarray, capacity: int
) -> tuple[int, int, int]:
    """Bytes one node's cache fetches over its steps (``shard_steps``: the shard of each
    sample the node reads, a row a step), under Belady's policy (evict the shard used
    again furthest ahead), under LRU, and with no limit. The cache holds at most
    ``capacity`` shards between steps; within a step, what the node's GPUs read in it."""
    n_shards = len(shard_bytes)
    steps = len(shard_steps)
    ordered = np.sort(shard_steps, axis=1)
    keep = np.ones_like(ordered, dtype=bool)
    keep[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    when, shard = np.nonzero(keep)[0], ordered[keep]
    by_shard = np.lexsort((when, shard))
    following = np.full(len(shard), np.iinfo(np.int64).max)
    same = shard[by_shard][1:] == shard[by_shard][:-1]
    following[by_shard[:-1][same]] = when[by_shard][1:][same]
    bounds = np.searchsorted(when, np.arange(steps + 1))
    fetched = {"belady": 0, "lru": 0}
    cached = {policy: np.zeros(n_shards, bool) for policy in fetched}
    count = dict.fromkeys(fetched, 0)
    key = {"belady": np.zeros(n_shards, np.int64), "lru": np.zeros(n_shards, np.int64)}
    for step in range(steps):
        lo, hi = bounds[step], bounds[step + 1]
        need = shard[lo:hi]
        # each policy evicts the largest key: the next use (Belady), minus the last (LRU)
        for policy, evict_last in (("belady", following[lo:hi]), ("lru", -step)):
            here = cached[policy]
            missing = need[~here[need]]
            if len(missing):
                fetched[policy] += int(shard_bytes[missing].sum())
                count[policy] += len(missing)
                here[missing] = True
            key[policy][need] = evict_last
            if count[policy] > capacity:
                holding = np.flatnonzero(here)
                drop = holding[np.argpartition(key[policy][holding], capacity - 1)[capacity:]]
                here[drop] = False
                count[policy] = capacity
    return fetched["belady"], fetched["lru"], int(shard_bytes[np.unique(shard)].sum())


def measure(
    batches: np.ndarray, data: LabelOrdered, world: World, capacity: int
) -> dict[str, float]:
    steps = len(batches)
    shards = data.shard_of_sample[batches]
    labels = data.label[batches]
    device_tv, device_pairs = label_measures(labels.reshape(-1, world.batch), data.label_p)
    global_tv, _ = label_measures(labels.reshape(steps, -1), data.label_p)
    by_node = shards.reshape(steps, world.nodes, -1)  # a node's GPUs are consecutive ranks
    fetched = (
        np.array(
            [downloads(by_node[:, node], data.shard_bytes, capacity) for node in range(world.nodes)]
        )
        / data.shard_bytes.sum()
    )  # (nodes, policies): bytes as fractions of the data set
    return {
        "steps": steps,
        "coverage": steps * world.global_batch / len(data),
        "device_shards": float(distinct_per_row(shards.reshape(-1, world.batch)).mean()),
        "global_shards": float(distinct_per_row(shards.reshape(steps, -1)).mean()),
        "bytes": float(fetched[:, 0].sum()),
        "bytes_lru": float(fetched[:, 1].sum()),
        "bytes_unlimited": float(fetched[:, 2].sum()),
        "bytes_node_max": float(fetched[:, 0].max()),
        "device_tv": device_tv,
        "global_tv": global_tv,
        "device_pairs": device_pairs,
    }


# --- the run -----------------------------------------------------------------------------


def variants(
    data: LabelOrdered,
    world: World,
    args: argparse.Namespace,
    orders: dict[tuple[int, int, int], np.ndarray],
) -> dict[str, Callable[[], np.ndarray]]:
    """Each variant's batches for ``world``; ``orders`` keeps fastload's global orders by
    (window, groups, global batch): one group's are the same for every world size."""
    seed, epoch = args.seed, args.epoch

    def fastload(window: int, groups: int = 1) -> np.ndarray:
        if world.size % groups:
            raise ValueError(f"a world of {world.size} is not {groups} nodes of equal size")
        key = (window, groups, world.global_batch if groups > 1 else 1)
        if key not in orders:
            orders[key] = fastload_order(data, window, seed, epoch, groups=groups,
                                         global_batch=key[2])  # fmt: skip
        return global_batches(orders[key], world)

    runs: dict[str, Callable[[], np.ndarray]] = {
        "permutation": lambda: permutation(data, world, seed, epoch)
    }
    for window in [*args.windows, len(data.shards)]:
        name = f"fastload window={window}" if window < len(data.shards) else (
            f"fastload window=all ({window})")  # fmt: skip
        runs[name] = partial(fastload, window)
    for window in args.group_windows if world.nodes > 1 else ():  # one node: the rows above
        runs[f"fastload groups={world.nodes} window={window}"] = partial(
            fastload, window, world.nodes
        )
    runs[f"WebDataset shuffle({args.wds_buffer})"] = lambda: webdataset_order(
        data, world, seed, epoch, args.wds_buffer, args.wds_shardshuffle
    )
    runs["Streaming py1e (defaults)"] = lambda: streaming_order(data, world, seed, epoch)
    block = args.streaming_block
    runs[f"Streaming py1e, block={block} shards"] = lambda: streaming_order(
        data, world, seed, epoch, block * data.per_shard
    )
    return runs


def goals_of(row: dict[str, Any]) -> dict[str, bool]:
    return {
        "device": bool(row["device_ratio"] >= GOALS["device"]),
        "global": bool(row["global_ratio"] >= GOALS["global"]),
        "bytes": bool(row["bytes"] <= GOALS["bytes"]),
        "label": bool(row["device_tv_ratio"] <= GOALS["label"]),
        "label_global": bool(row["global_tv_ratio"] <= GOALS["label"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=1281)
    parser.add_argument("--sample-kb", type=float, default=110)
    parser.add_argument("--shard-mb", type=float, default=256, help="MiB per shard")
    parser.add_argument("--batch-size", type=int, default=32, help="per device")
    parser.add_argument("--worlds", default="1,8,64")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8, help="per rank: WebDataset, Streaming")
    parser.add_argument("--cache-gib", type=float, default=16, help="shard cache per node")
    parser.add_argument("--windows", default="4,8,16,32,64,128")
    parser.add_argument(
        "--group-windows", default="16,32,64", help="windows with groups = nodes (per node)"
    )
    parser.add_argument(
        "--streaming-block", type=int, default=None, help="py1e block in shards; 3/4 cache"
    )
    parser.add_argument("--wds-buffer", type=int, default=1000)
    parser.add_argument("--wds-shardshuffle", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--out", type=Path, default=results_folder())
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="a small data set: does it run?")
    args = parser.parse_args(argv)
    if args.smoke:
        args.classes, args.per_class, args.batch_size, args.workers = 100, 200, 8, 2
        args.shard_mb = 50 * args.sample_kb * 1000 / 2**20  # 50 samples a shard, 400 shards
        args.cache_gib = 16 * args.shard_mb / 1024  # 16 shards
        args.windows, args.group_windows = "2,4,8,16,32", "4,8,16"
    args.worlds = [int(w) for w in args.worlds.split(",")]
    args.windows = [int(w) for w in args.windows.split(",")]
    args.group_windows = [int(w) for w in args.group_windows.split(",") if w]
    sample_bytes = round(args.sample_kb * 1000)
    per_shard = max(1, int(args.shard_mb * 2**20 // sample_bytes))
    data = LabelOrdered(args.classes, args.per_class, per_shard, sample_bytes)
    capacity = max(1, int(args.cache_gib * 2**30 / (per_shard * sample_bytes) + 1e-9))
    args.streaming_block = args.streaming_block or max(1, capacity * 3 // 4)
    if any(w >= len(data.shards) for w in args.windows):
        parser.error(f"windows must be below the number of shards, {len(data.shards)}")

    started = time.perf_counter()
    rows = evaluate(data, args, capacity)
    seconds = time.perf_counter() - started
    table = table_of(rows)
    print(table)
    notes = dict.fromkeys(f"{row['name']}: {row['note']}" for row in rows if "goals" in row
                          and row.get("note"))  # fmt: skip
    for note in notes:
        print(f"- {note}")
    settings = {key: value for key, value in vars(args).items() if key != "out"} | {
        "samples": len(data), "shards": len(data.shards), "samples_per_shard": per_shard,
        "cache_shards_per_node": capacity, "goals": GOALS, "compute_seconds": round(seconds, 1),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "shuffle_quality.json"
    payload = {
        "benchmark": "shuffle_quality", "machine": machine(), "settings": settings,
        "baseline": "permutation", "unit": "ratio to the permutation's", "rows": rows,
        "summary": summary(rows), "table": table,
    }  # fmt: skip
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path} ({seconds:.1f} s of computing)")
    if args.plot:
        plot(path)


def evaluate(data: LabelOrdered, args: argparse.Namespace, capacity: int) -> list[dict[str, Any]]:
    """A row per world size and variant: its measures, their ratios to the permutation's,
    the goals it meets; or a note saying why it has none."""
    rows: list[dict[str, Any]] = []
    orders: dict[tuple[int, int, int], np.ndarray] = {}
    for size in args.worlds:
        world = World(size, args.batch_size, args.gpus_per_node, args.workers)
        results: dict[str, dict[str, Any]] = {}
        for name, make in variants(data, world, args, orders).items():
            try:
                batches = make()
                if len(batches) == 0:
                    raise ValueError("no complete global batch")
            except ImportError as error:
                results[name] = {"note": f"not installed here: {error.name}"}
                continue
            except ValueError as error:
                results[name] = {"note": str(error)}
                continue
            results[name] = measure(batches, data, world, capacity)
            if name.startswith("WebDataset"):  # a stream per worker, each shard read once
                once = results[name]["bytes_unlimited"]
                results[name] |= {"bytes": once, "bytes_lru": once, "note": NOTES["WebDataset"]}
            elif name.startswith("Streaming") and "default" in name:
                results[name]["note"] = NOTES["Streaming"]
        ideal = results["permutation"]
        for name, result in results.items():
            row: dict[str, Any] = {"name": name, "world": size, "nodes": world.nodes}
            if "device_shards" not in result:
                rows.append(row | result)
                continue
            row |= result | {
                "device_ratio": result["device_shards"] / ideal["device_shards"],
                "global_ratio": result["global_shards"] / ideal["global_shards"],
                "device_tv_ratio": result["device_tv"] / ideal["device_tv"],
                "global_tv_ratio": result["global_tv"] / ideal["global_tv"],
                "device_pairs_ratio": result["device_pairs"] / ideal["device_pairs"],
            }
            row["goals"] = goals_of(row)
            rows.append(row)
    return rows


def table_of(rows: list[dict[str, Any]]) -> str:
    return format_table(
        ["world (nodes)", "variant", "shards/dev batch", "shards/glob batch",
         "bytes next-use", "bytes LRU", "bytes no limit", "label TV dev", "label TV glob",
         "same-label pairs", "goals met"],
        [[f"{row['world']} ({row['nodes']})", row["name"], *(
            [row["note"], "", "", "", "", "", "", "", ""] if "goals" not in row else [
                f"{row['device_ratio']:.2f} ({row['device_shards']:.1f})",
                f"{row['global_ratio']:.2f} ({row['global_shards']:.1f})",
                f"{row['bytes']:.2f}x", f"{row['bytes_lru']:.2f}x",
                f"{row['bytes_unlimited']:.2f}x",
                f"{row['device_tv_ratio']:.3f}", f"{row['global_tv_ratio']:.2f}",
                f"{row['device_pairs_ratio']:.1f}", met(row["goals"])])]
         for row in rows],
    )  # fmt: skip


def met(goals: dict[str, bool]) -> str:
    names = {"device": "dev", "global": "glob", "bytes": "bytes", "label": "label",
             "label_global": "label-glob"}  # fmt: skip
    return " ".join(short for key, short in names.items() if goals[key]) or "none"


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """Per world size, the variants that meet each goal, and those that meet the four (the
    label goal read per device batch, as the issue has it, or per global batch)."""
    out: dict[str, dict[str, list[str]]] = {}
    for world in sorted({row["world"] for row in rows}):
        mine = [row for row in rows if row["world"] == world and "goals" in row]
        four = ("device", "global", "bytes")
        out[str(world)] = {
            "all goals": [r["name"] for r in mine if all(r["goals"][g] for g in (*four, "label"))],
            "all goals, label per global batch": [
                r["name"] for r in mine if all(r["goals"][g] for g in (*four, "label_global"))
            ],
            **{goal: [r["name"] for r in mine if r["goals"][goal]] for goal in mine[0]["goals"]},
        }
    return out


def plot(result: Path) -> Path:
    """Per world size, quality (distinct shards per device batch, and per global batch, to
    the permutation's) against the bytes downloaded; the goals' corner shaded green."""
    plt = pyplot()
    data = json.loads(result.read_text())
    rows = [row for row in data["rows"] if "goals" in row]
    worlds = sorted({row["world"] for row in rows})
    right = max(row["bytes"] for row in rows) * 2
    fig, axes = plt.subplots(2, len(worlds), figsize=(5 * len(worlds), 8), squeeze=False)
    for column, world in enumerate(worlds):
        mine = [row for row in rows if row["world"] == world]
        for line, what in enumerate(("device", "global")):
            ax, metric, goal = axes[line][column], f"{what}_ratio", GOALS[what]
            ax.fill_between([0.8, GOALS["bytes"]], goal, 1.08, color="#c9e6c0", zorder=0)
            for prefix, look, label in (
                ("fastload window=", "o-", "fastload ShardShuffle, by window"),
                ("fastload groups=", "*--", "fastload, groups = nodes, by window per node"),
            ):
                fast = [row for row in mine if row["name"].startswith(prefix)]
                ax.plot([r["bytes"] for r in fast], [r[metric] for r in fast], look,
                        color=FASTLOAD[prefix], label=label, markersize=9)  # fmt: skip
                for row in fast:
                    window = row["name"].split("window=")[1].split(" ")[0]
                    ax.annotate(window, (row["bytes"], row[metric]), fontsize=7,
                                xytext=(5, -3), textcoords="offset points")  # fmt: skip
            for row in mine:
                if not row["name"].startswith("fastload"):
                    marker, colour = STYLES[next(k for k in STYLES if row["name"].startswith(k))]
                    ax.plot(row["bytes"], row[metric], marker, color=colour, markersize=8,
                            label=row["name"], linestyle="none", alpha=0.85)  # fmt: skip
            ax.set_xscale("log")
            ax.set_xlim(0.8, right)
            ax.set_ylim(0, 1.08)
            nodes = mine[0]["nodes"]
            ax.set_title(f"world {world} ({nodes} node{'s' * (nodes > 1)}): {what} batch")
            ax.set_xlabel("bytes downloaded / data set (all nodes, next-use cache)")
            ax.set_ylabel(f"distinct shards per {what} batch / permutation's")
    axes[0][-1].legend(loc="lower right", fontsize=7)
    settings = data["settings"]
    fig.suptitle(
        f"{settings['samples']:,} samples in label order, {settings['shards']} shards, "
        f"a cache of {settings['cache_shards_per_node']} shards per node; green: the goals"
    )
    return save_figure(fig, result)


FASTLOAD = {"fastload window=": "#2a7ab0", "fastload groups=": "#d9534f"}
STYLES = {  # name prefix -> marker, colour
    "permutation": ("X", "#333333"),
    "WebDataset": ("s", "#f0ad4e"),
    "Streaming py1e (": ("^", "#5cb85c"),
    "Streaming py1e,": ("D", "#2d6a2d"),
}


if __name__ == "__main__":
    main()
