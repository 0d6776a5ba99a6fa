"""The index layouts before version 4, as fastload wrote them: version 2 (every sample's
members inline in ``index.json``, written by the old code path) and version 3 (each
member table a file beside its shard: an upgrade of version 2), so that tests read old
indexes and upgrade them."""

from __future__ import annotations

import os
from pathlib import Path

from fastload.shards import ShardedDataset
from fastload.shards.format.index import (
    INDEX,
    file_sha256,
    shard_entry,
    table_name,
    write_inline_index,
)
from fastload.shards.format.layout import upgrade_index


def to_version_2(folder: Path) -> Path:
    """Rewrite ``folder``'s index (version 3 or 4) as version 2: the member tables
    removed, beside the shards or from their ends (the shards then as old fastload
    wrote them, tars alone)."""
    dataset = ShardedDataset(folder)
    entries = []
    for number, shard in enumerate(dataset.shards):
        samples = list(dataset.members(number).samples())
        if shard.table_inside:
            os.truncate(folder / shard.name, shard.size - shard.table_size)
        else:
            (folder / table_name(shard.name)).unlink()
        path = folder / shard.name
        entries.append(shard_entry(shard.name, path.stat().st_size, file_sha256(path), samples))
    meta = {key: value for key, value in dataset.meta.items()
            if key not in ("format", "version", "shards_sha256")}  # fmt: skip
    (folder / INDEX).unlink()
    return write_inline_index(folder, entries, meta)


def to_version_3(folder: Path) -> Path:
    """Rewrite ``folder``'s index as version 3, each member table a file beside its
    shard, as ``fastload index --upgrade`` makes it of version 2."""
    to_version_2(folder)
    return upgrade_index(folder)[0]
