"""Sharded datasets: tar shards in the WebDataset layout with a JSON index, written by
:func:`write_shards` (``fastload convert SRC DEST --shards``) and read by
:class:`ShardedDataset`, in an order that depends on the seed and epoch only
(:class:`ShardShuffle`)."""

from fastload.shards.dataset import ShardedDataset
from fastload.shards.order import ShardShuffle
from fastload.shards.writer import write_shards

__all__ = ["ShardShuffle", "ShardedDataset", "write_shards"]
