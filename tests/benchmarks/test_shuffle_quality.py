"""benchmarks/shuffle_quality.py: its model of each order and of the cache is checked on
cases worked by hand, and a smoke run's table has the properties any honest measure of a
shuffle must have (a full window is a permutation; a wider window is no worse)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import shuffle_quality as sq
from fastload.shards.order import ShardShuffle

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

WORLDS = (1, 8, 64)
WINDOWS = (2, 4, 8, 16, 32)  # the smoke run's, below its 400 shards
GROUP_WINDOWS = (4, 8, 16)  # the smoke run's with groups = nodes: within its 16-shard cache


@pytest.mark.parametrize("world_size, groups", [(1, 1), (2, 1), (6, 1), (4, 2), (6, 3)])
def test_each_rank_gets_the_batches_shard_shuffle_gives_it(world_size: int, groups: int):
    data = sq.LabelOrdered(classes=10, per_class=31, per_shard=7, sample_bytes=1000)
    world = sq.World(world_size, batch=3, gpus_per_node=2, workers=1)
    order = sq.fastload_order(data, 3, seed=5, epoch=2, groups=groups,
                              global_batch=world.global_batch)  # fmt: skip
    batches = sq.global_batches(order, world)
    for rank in range(world_size):
        sampler = ShardShuffle(data, global_batch_size=world.global_batch, seed=5, window=3,
                               groups=groups, rank=rank, world_size=world_size)  # fmt: skip
        sampler.set_epoch(2)
        assert batches[:, rank].ravel().tolist() == sampler.rank_order()


def test_the_cache_model_on_orders_worked_by_hand():
    sizes = np.array([10, 20, 30, 40])
    # read in sequence: every shard fetched once, whatever the policy
    assert sq.downloads(np.array([[0, 0], [1, 1], [1, 2], [3, 3]]), sizes, 1) == (100,) * 3
    # 0 1 2 0 1 2 with room for 2: LRU always misses; next-use eviction drops 2 once read
    # (its next use is the furthest), keeps 0 and 1, and misses only 2 again
    cyclic = np.array([[0], [1], [2], [0], [1], [2]])
    assert sq.downloads(cyclic, sizes, 2) == (10 + 20 + 30 + 30, 2 * (10 + 20 + 30), 60)


def test_label_measures_by_hand():
    uniform = np.full(4, 0.25)
    tv, pairs = sq.label_measures(np.array([[0, 0, 0, 0], [0, 1, 2, 3]]), uniform)
    assert tv == pytest.approx((0.75 + 0) / 2) and pairs == pytest.approx((1 + 0) / 2)
    assert sq.label_measures(np.array([[2, 2, 3, 3]]), uniform) == pytest.approx((0.5, 2 / 6))


@pytest.mark.slow
def test_a_smoke_run_measures_what_a_shuffle_must_have(tmp_path: Path):
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "shuffle_quality.py"), "--smoke", "--plot",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "shuffle_quality.json").read_text())
    assert (tmp_path / "shuffle_quality.png").stat().st_size > 0
    assert {"benchmark", "machine", "settings", "rows", "summary", "table"} <= set(result)
    settings = result["settings"]
    assert settings["shards"] == 400 and settings["cache_shards_per_node"] == 16
    assert list(result["summary"]) == [str(w) for w in WORLDS]
    rows = {(row["world"], row["name"]): row for row in result["rows"]}
    everything = "fastload window=all (400)"
    fastload = [f"fastload window={w}" for w in WINDOWS] + [everything]
    for world in WORLDS:
        names = [name for w, name in rows if w == world]
        assert names[: len(fastload) + 1] == ["permutation", *fastload]
        nodes = rows[world, "permutation"]["nodes"]
        windows = GROUP_WINDOWS if nodes > 1 else ()  # one node: the rows without groups
        grouped = [f"fastload groups={nodes} window={w}" for w in windows]
        assert [name for name in names if "groups=" in name] == grouped
        assert sum(name.startswith("WebDataset") for name in names) == 1
        assert sum(name.startswith("Streaming") for name in names) == 2

        ideal = rows[world, "permutation"]
        for key in ("device_ratio", "global_ratio", "device_tv_ratio", "global_tv_ratio"):
            assert ideal[key] == 1.0
        full = rows[world, everything]  # a window of every shard is a permutation
        assert full["device_ratio"] == pytest.approx(1, abs=0.03)
        assert full["global_ratio"] == pytest.approx(1, abs=0.03)
        assert full["device_tv_ratio"] == pytest.approx(1, abs=0.01)
        assert full["global_tv_ratio"] == pytest.approx(1, abs=0.05)
        assert full["bytes"] == pytest.approx(ideal["bytes"], rel=0.1)

        # a wider window mixes at least as well (within noise), and labels no worse
        by_window = [rows[world, name] for name in fastload]
        for narrow, wide in itertools.pairwise(by_window):
            assert wide["device_ratio"] >= narrow["device_ratio"] - 0.02
            assert wide["global_ratio"] >= narrow["global_ratio"] - 0.02
            assert wide["device_tv_ratio"] <= narrow["device_tv_ratio"] + 0.01
        assert by_window[0]["device_ratio"] < 0.5 < by_window[-1]["device_ratio"]

        for row in (rows[world, name] for name in names):
            if "goals" not in row:  # a peer that is not installed here says so
                assert row["note"].startswith("not installed")
                continue
            assert row["bytes"] >= row["coverage"] - 1e-9 and row["bytes"] >= 0.95
            assert row["bytes_unlimited"] <= row["bytes"] + 1e-9 <= row["bytes_lru"] + 2e-9
            assert row["bytes_unlimited"] <= row["nodes"] + 1e-9
            assert row["goals"]["device"] == (row["device_ratio"] >= 0.8)
            assert row["goals"]["global"] == (row["global_ratio"] >= 0.95)
            assert row["goals"]["bytes"] == (row["bytes"] <= 1.05)
            assert row["goals"]["label"] == (row["device_tv_ratio"] <= 1.1)
        for window, name in zip(windows, grouped, strict=True):
            # a group per node: each node reads its own shards (a window that fits in its
            # cache), so the data set is fetched about once, and a global batch reads
            # from every node's window
            row, plain = rows[world, name], rows[world, f"fastload window={window}"]
            assert row["bytes"] <= 1.05 and row["goals"]["bytes"]
            assert row["global_ratio"] > 1.4 * plain["global_ratio"]
            assert row["device_ratio"] == pytest.approx(plain["device_ratio"], abs=0.03)
        if world < 16:  # one node: a window that fits in its cache is fetched once
            for window in (w for w in WINDOWS if w <= settings["cache_shards_per_node"]):
                assert rows[world, f"fastload window={window}"]["bytes"] <= 1 + 1e-9
