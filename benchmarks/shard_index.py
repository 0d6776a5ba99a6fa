"""What a shard set's index costs a reader: the time to construct a ``ShardedDataset``, the
memory that adds to its process and the bytes it pickles to (what every spawned worker
receives), with the index of version 2 (every sample's members inline in ``index.json``)
against version 3 (per-shard facts in ``index.json``, members in a table per shard read
on the shard's first read).

The shard set is synthetic: ``--samples`` samples (a ``.jpg`` of ``--sample-kb`` KB and a
``.cls`` each) in ``--shards`` shards, of which only the index files are written; the
shards are sparse files of their indexed sizes (construction reads none of their bytes,
and nothing here verifies them). Each construction runs in a fresh process (its memory
growth is then its own), ``--rounds`` times per layout, interleaved; the medians are
reported. ``first table ms``: version 3's first read of one shard's table.

Usage:
    python benchmarks/shard_index.py [--samples 1281167] [--shards 5000] [--rounds 3]
        [--large 100000000] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, report
from fastload.shards.format.index import INDEX, INLINE, Member, index_bytes, table_name, write_whole
from fastload.shards.format.table import table_bytes
from fastload.tools.measure import Measurement

ROOT = Path(__file__).resolve().parents[1]
_TAR_BLOCK = 512


def _members(key: int, at: int, sample_bytes: int) -> tuple[dict[str, Member], int]:
    """A sample's ``jpg`` and ``cls`` members as a tar lays them out from ``at`` (a header
    block, then the data padded to a block); returns them and where the next starts."""
    members = {}
    for extension, size in (("jpg", sample_bytes), ("cls", 1)):
        members[extension] = Member(extension, at + _TAR_BLOCK, size)
        at += _TAR_BLOCK + -(-size // _TAR_BLOCK) * _TAR_BLOCK
    return members, at


def write_synthetic(
    folder: Path, *, samples: int, shards: int, sample_bytes: int = 110_000,
    layout: int = 3, tables: bool = True,
) -> Path:  # fmt: skip
    """Index files of ``samples`` samples in ``shards`` sparse shards in ``folder``, in
    ``layout`` 2 (members inline) or 3 (a table per shard; ``tables=False`` writes
    ``index.json`` only, with the tables' facts made up: for constructions that read none).

    Example:
        >>> import tempfile
        >>> from fastload.shards import ShardedDataset
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = write_synthetic(folder, samples=10, shards=3)
        >>> len(ShardedDataset(folder)), ShardedDataset(folder).members(2).key(0)
        (10, '000000007')
    """
    folder.mkdir(parents=True, exist_ok=True)
    entries, first = [], 0
    for number in range(shards):
        count = samples * (number + 1) // shards - first
        listed, at = [], 0
        needed = layout == INLINE or tables or number == 0  # its members are written
        for key in range(first, first + count) if needed else ():
            members, at = _members(key, at, sample_bytes)
            listed.append((f"{key:09d}", members))
        at = _members(0, 0, sample_bytes)[1] * count  # every sample takes the same blocks
        name, size = f"shard-{number:06d}.tar", at + 2 * _TAR_BLOCK  # tar's end blocks
        with open(folder / name, "wb") as file:
            file.truncate(size)  # sparse: no bytes written
        fake = f"{number:064x}"  # a SHA-256 in form; nothing verifies it here
        if layout == INLINE:
            entries.append({"name": name, "size": size, "sha256": fake, "samples": [
                [key, {e: [m.offset, m.size] for e, m in members.items()}]
                for key, members in listed
            ]})  # fmt: skip
        else:
            data = table_bytes(listed) if needed else b""
            if data:
                write_whole(folder / table_name(name), data)
            entries.append({"name": name, "size": size, "sha256": fake, "count": count,
                            "extensions": ["jpg", "cls"], "table_size": len(data),
                            "table_sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
        first += count
    meta = {"source": "synthetic", "samples": samples, "classes": None, "fields": None}
    write_whole(folder / INDEX, index_bytes(entries, meta, layout))
    return folder / INDEX


def child(folder: Path) -> None:
    """Construct the dataset in this fresh process; print its cost as JSON."""
    import gc
    import pickle

    import psutil

    from fastload.shards import ShardedDataset

    gc.collect()
    before = psutil.Process().memory_info().rss
    start = time.perf_counter()
    dataset = ShardedDataset(folder)
    seconds = time.perf_counter() - start
    grown = psutil.Process().memory_info().rss - before
    pickled = len(pickle.dumps(dataset))
    start = time.perf_counter()
    dataset.members(0)
    first_table = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss": grown, "pickled": pickled,
                      "first_table": first_table, "samples": len(dataset)}))  # fmt: skip


def construct(folder: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.shard_index", "--child", str(folder)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.splitlines()[-1]))


def _row(name: str, runs: list[dict[str, float]], index: Path, note: str = "") -> Row:
    mib = 1 << 20
    return Row(name, Measurement(tuple(run["seconds"] for run in runs)), int(runs[0]["samples"]),
               extra={"RSS growth MiB": round(statistics.median(r["rss"] for r in runs) / mib, 1),
                      "pickled MiB": round(runs[0]["pickled"] / mib, 3),
                      "index.json MiB": round(index.stat().st_size / mib, 2),
                      "first table ms": round(runs[0]["first_table"] * 1000, 2)},
               note=note or None)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_281_167, help="ImageNet-1k's")
    parser.add_argument("--shards", type=int, default=5000)
    parser.add_argument("--sample-kb", type=float, default=110)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large", type=int, default=0,
                        help="also samples of a large set, version 3 only (0: none)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="a small set, one round")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    if args.smoke:
        args.samples, args.shards, args.rounds, args.large = 2000, 20, 1, 0
    sample_bytes = int(args.sample_kb * 1000)
    with tempfile.TemporaryDirectory(prefix="fastload-shard-index-") as scratch:
        folders = {}
        for layout in (2, 3):
            folders[layout] = Path(scratch) / f"v{layout}"
            write_synthetic(folders[layout], samples=args.samples, shards=args.shards,
                            sample_bytes=sample_bytes, layout=layout)  # fmt: skip
        runs: dict[int, list[dict[str, float]]] = {2: [], 3: []}
        for _ in range(args.rounds):  # interleaved: a slower moment hits both
            for layout in (2, 3):
                runs[layout].append(construct(folders[layout]))
        rows = [_row(f"version {layout}", runs[layout], folders[layout] / INDEX)
                for layout in (2, 3)]  # fmt: skip
        if args.large:
            large = Path(scratch) / "large"
            shards = args.large * args.shards // args.samples
            write_synthetic(large, samples=args.large, shards=shards, sample_bytes=sample_bytes,
                            tables=False)  # fmt: skip
            rows.append(_row(f"version 3, {args.large:,} samples", [construct(large)],
                             large / INDEX, note=f"{shards:,} shards, one round"))  # fmt: skip
    report("shard_index", rows, baseline="version 2", unit="samples",
           settings={"samples": args.samples, "shards": args.shards, "rounds": args.rounds,
                     "sample_kb": args.sample_kb, "large": args.large},
           out=args.out)  # fmt: skip
    return None


if __name__ == "__main__":
    main()
