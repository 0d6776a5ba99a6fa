"""Which transport reaches a URL: its scheme's (:data:`SCHEMES`), connected."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from fastload.shards.stores.obstore_shards import SCHEMES as STORE_SCHEMES
from fastload.shards.stores.obstore_shards import ObjectShards
from fastload.shards.stores.s3 import S3Shards
from fastload.shards.stores.transport import Transport

__all__ = ["SCHEMES", "connect", "is_remote"]


#: URL scheme -> the transport that reaches it.
SCHEMES: dict[str, type[S3Shards] | type[ObjectShards]] = {
    "s3": S3Shards,
    **dict.fromkeys(STORE_SCHEMES, ObjectShards),
}


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL of a scheme in :data:`SCHEMES` (a local path otherwise).

    Example:
        >>> is_remote("s3://bucket/set"), is_remote("/data/set"), is_remote("C:/data")
        (True, False, False)
    """
    return isinstance(path, str) and urlparse(path).scheme in SCHEMES


def connect(
    url: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> Transport:
    """The transport of ``url``'s scheme."""
    transport = SCHEMES[urlparse(url).scheme]
    return transport(url, cache_dir=cache_dir, cache_limit=cache_limit, options=options)
