"""What one URL scheme gives: the objects under a prefix (:class:`Bucket`). S3's is
:class:`~fastload.shards.stores.s3.S3Bucket`, the other stores' (GCS, Azure, https)
:class:`~fastload.shards.stores.obstore_bucket.ObstoreBucket`; the node's cache of a
shard set composes one (:class:`~fastload.shards.stores.cached.CachedShards`), and a
conversion writes through one (:mod:`~fastload.shards.writing.destination`).

Every error a bucket raises is one a user can act on and names the object's URL: a
missing ``index.json`` is a :class:`~fastload.shards.format.index.ShardIndexError`, a
missing object a :class:`FileNotFoundError`, refused credentials a
:class:`PermissionError`, the rest an :class:`OSError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["Bucket", "TablePart"]

#: A member table to bring in a shard's download: its object's name, and the file to
#: write it into.
TablePart = tuple[str, Path]


class Bucket(Protocol):
    """The objects under one prefix of one store, as ``url`` names them."""

    url: str
    #: Whether objects may be written there (a web server's may not).
    writable: bool
    #: Concurrent requests of one download.
    parallel: int
    #: Whether a ranged read whose bytes stop coming is asked again
    #: (:mod:`~fastload.shards.stores.hedging`).
    hedging: bool

    @property
    def chunk(self) -> int:
        """Bytes per ranged read."""

    @property
    def hedge_counts(self) -> dict[str, int]:
        """This process's ranged reads, hedges, and hedges that answered first."""

    def read(self, name: str) -> bytes:
        """The whole object ``name``."""

    def listing(self) -> dict[str, int]:
        """Name -> size of the objects right under the prefix."""

    def download(
        self, name: str, part: Path, spans: list[tuple[int, int]], table: TablePart | None
    ) -> tuple[str, str | None]:
        """Bytes ``spans`` (first, last) of the object ``name`` written in order into the
        file ``part``, and ``table`` (when given) into its file in the same round trip:
        their SHA-256 (the table's None where it could not be read: its reader asks again)."""

    def exists(self, name: str) -> bool:
        """Whether the object ``name`` is there."""

    def names(self, prefix: str) -> list[str]:
        """The objects whose names start with ``prefix``, sorted."""

    def write(self, name: str, data: bytes | Path) -> None:
        """Put ``data`` (bytes, or a file's) as the object ``name``: whole or not at all."""

    def delete(self, name: str) -> None:
        """Remove the object ``name``."""
