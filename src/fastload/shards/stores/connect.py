"""Which store reaches a URL: its scheme's bucket (:data:`SCHEMES`), and the node's
cache of a shard set there."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from fastload.shards.stores.bucket import Bucket
from fastload.shards.stores.cached import CachedShards
from fastload.shards.stores.obstore_bucket import SCHEMES as STORE_SCHEMES
from fastload.shards.stores.obstore_bucket import ObstoreBucket
from fastload.shards.stores.s3 import S3Bucket
from fastload.shards.stores.transport import Transport

__all__ = ["SCHEMES", "bucket", "connect", "is_remote"]


#: URL scheme -> the bucket that reaches it.
SCHEMES: dict[str, type[S3Bucket] | type[ObstoreBucket]] = {
    "s3": S3Bucket,
    **dict.fromkeys(STORE_SCHEMES, ObstoreBucket),
}


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL of a scheme in :data:`SCHEMES` (a local path otherwise).

    Example:
        >>> is_remote("s3://bucket/set"), is_remote("/data/set"), is_remote("C:/data")
        (True, False, False)
    """
    return isinstance(path, str) and urlparse(path).scheme in SCHEMES


def bucket(url: str, options: dict[str, Any] | None = None) -> Bucket:
    """The objects under ``url``, through its scheme's client (``options``: its settings)."""
    return SCHEMES[urlparse(url).scheme](url, options=options)


def connect(
    url: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> Transport:
    """The shard set at ``url``, read through the node's cache."""
    return CachedShards(bucket(url, options), cache_dir=cache_dir, cache_limit=cache_limit)
