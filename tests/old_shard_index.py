"""The index layout of version 2 (every sample's members inline in ``index.json``), as
fastload wrote it before version 3: written by the old code path, so that tests read
old indexes and upgrade them."""

from __future__ import annotations

from pathlib import Path

from fastload.shards import ShardedDataset
from fastload.shards.index import INDEX, shard_entry, table_name, write_inline_index


def to_version_2(folder: Path) -> Path:
    """Rewrite ``folder``'s index (version 3) as version 2, its member tables removed."""
    dataset = ShardedDataset(folder)
    entries = [
        shard_entry(shard.name, shard.size, shard.sha256, list(dataset.members(number).samples()))
        for number, shard in enumerate(dataset.shards)
    ]
    meta = {key: value for key, value in dataset.meta.items()
            if key not in ("format", "version", "shards_sha256")}  # fmt: skip
    (folder / INDEX).unlink()
    path = write_inline_index(folder, entries, meta)
    for shard in dataset.shards:
        (folder / table_name(shard.name)).unlink()
    return path
