"""Sharded datasets: tar shards in the WebDataset layout with a JSON index, written by
:func:`write_shards` (``fastload convert SRC DEST --shards``) and read by
:class:`ShardedDataset`, in an order that depends on the seed and epoch only
(:class:`ShardShuffle`). Each name loads on first use, so a submodule (the index, the
transport) imports without the reader's and the writer's dependencies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload._lazy import lazy_exports

__all__ = ["ShardShuffle", "ShardedDataset", "write_shards"]

if TYPE_CHECKING:
    from fastload.shards.dataset import ShardedDataset
    from fastload.shards.order import ShardShuffle
    from fastload.shards.writing.writer import write_shards

_EXPORTS = {
    "ShardShuffle": "fastload.shards.order",
    "ShardedDataset": "fastload.shards.dataset",
    "write_shards": "fastload.shards.writing.writer",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
