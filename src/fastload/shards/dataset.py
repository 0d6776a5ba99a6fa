"""ShardedDataset: a map-style dataset over a shard set, so that FastLoader, ``seed=``,
``state_dict`` and ``DistributedSampler`` work as they do for LMDB."""

from __future__ import annotations

import bisect
import os
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastload._checks import check_int
from fastload.datasets.base import ImageDataset
from fastload.decode.opencv import DecodeMode, decoded_size
from fastload.records.format import RecordFormatError, unpack_record
from fastload.records.targets import fields_target
from fastload.shards.format import members as member_values
from fastload.shards.format.index import (
    INDEX,
    PROGRESS,
    Member,
    ShardIndexError,
    file_sha256,
    load_index,
)
from fastload.shards.format.layout import checked_table, load_table, table_at_end, table_place
from fastload.shards.format.members import IMAGES, decode_member
from fastload.shards.format.naming import selected_members
from fastload.shards.format.scan import scanned_index
from fastload.shards.format.table import MemberTable
from fastload.shards.stores.connect import connect, is_remote
from fastload.shards.stores.download_ahead import (
    START_DEPTH,
    DownloadAhead,
    deepest,
    download_ahead,
)
from fastload.shards.stores.node_cache import check_cache
from fastload.shards.stores.transport import Transport

__all__ = ["ShardedDataset"]

#: Shard files a process keeps open, the least recently read closed past it: a bound on
#: descriptors, and on the disk an evicted shard still holds while open (ShardShuffle's
#: default window is at most 64 shards).
OPEN_SHARDS = 64

#: Member tables a process keeps read, the least recently used dropped past it (a table
#: of 256 samples holds about 20 kB; indexes of version 3 and 4 read a shard's table on
#: its first read, not at construction).
CACHED_TABLES = 256

#: Members ``(image, label)`` reads; a sample with others says so once (``keys``).
_READ_BY_DEFAULT = frozenset({*IMAGES, "cls", "fastload"})


class ShardedDataset(ImageDataset):
    """The samples of the shard set in folder ``path`` (written by :func:`write_shards`), or
    at ``s3://bucket/prefix`` (its shards fetched into ``cache_dir``, at most
    ``cache_limit`` bytes, ``storage_options`` for ``boto3.client("s3", ...)``; see
    :mod:`fastload.shards.stores.s3`; ``gs://``, ``az://`` and ``https://`` through
    obstore), or WebDataset shards without an index (scanned, the
    scan kept in ``cache_dir`` if given; nothing is written beside them:
    ``fastload index FOLDER`` writes their index there once),
    in index order: ``(image, label)``, or ``(image, target)`` for detection and
    segmentation data, as :class:`~fastload.LMDBDataset` gives them (same ``decode``,
    ``min_size``, ``transform``, ``target_transform``, ``transforms``).

    Samples of other layouts (image and caption, ``jpg`` + ``txt`` + ``json``) come
    whole with ``keys``: ``keys=("jpg", "txt")`` gives ``(image, text)`` (the members
    in that order; a sample without one is an error naming it), ``keys="*"`` a dict of
    every member. A member is named by its extension as WebDataset splits it, lowercased,
    with ``.`` and ``-`` as ``_`` (``x.seg.png`` is ``seg_png``, ``x.text-en.txt``
    ``text_en_txt``; ``keys`` takes either spelling), and decoded by its last extension
    as WebDataset decodes it (text, JSON, class numbers, images through ``decode`` then
    ``transform``; ``.npy`` without pickle; ``.gz`` decompressed first; the rest as
    bytes): ``seg.png`` is an image. A tar WebDataset refuses (two members of one
    extension in a sample), or whose members the index cannot name, is refused naming
    the member. Without ``keys``, a set whose samples hold more than ``(image, label)``
    reads says so once.

    From object storage, under a :class:`~fastload.FastLoader` whose sampler publishes its
    order (:class:`~fastload.shards.ShardShuffle`), a thread of the loader's process
    downloads ahead of the workers (:meth:`fetch_ahead`). By default the depth follows
    the link: it starts at ``START_DEPTH`` shards past the one being read and grows by
    one each time the reader enters a shard still downloading, up to ``DEEPEST`` (under
    ``cache_limit``: half the shards it holds), and the next pass starts where the last
    ended (:class:`~fastload.shards.stores.download_ahead.DownloadAhead`). An int
    ``download_ahead`` fixes the depth at that many shards; ``download_ahead_bytes`` at
    the next shards whose sizes add up to at most that many bytes (a depth that means
    the same for 8 MB shards as for 1 GB ones; the next shard always).
    ``download_ahead=0`` and no bytes: each shard is fetched by the first worker that
    reads it.

    Members are read by their offsets in the index with ``os.pread`` on a file opened
    once per process (fork- and spawn-safe; at most ``OPEN_SHARDS`` open at once).
    Construction reads per-shard facts only: a shard's member table (at the shard's end,
    or ``NAME.idx`` beside it) is read and checked the first time one of its samples is read, and
    kept per process (at most ``CACHED_TABLES``), so the dataset pickles to a size that
    grows with the shards, not the samples. ``verify()`` checks every shard's SHA-256
    and every table.

    Example:
        >>> from fastload.shards import write_shards
        >>> from fastload.testing.shapes import ShapesDetection
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> _ = write_shards(ShapesDetection(3, size=(32, 32)), folder)
        >>> image, target = ShardedDataset(folder, decode="tensor")[2]
        >>> image.shape, sorted(target)
        (torch.Size([3, 32, 32]), ['boxes', 'labels', 'masks'])
    """

    #: The pixel limit, and the most a ``.gz`` member may decompress to.
    carried_limits = (*ImageDataset.carried_limits, (member_values, "MAX_GUNZIPPED"))

    def __init__(
        self,
        path: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        decode: DecodeMode = "numpy",
        min_size: int | tuple[int, int] | None = None,
        transforms: Callable[[Any, Any], tuple[Any, Any]] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        storage_options: dict[str, Any] | None = None,
        keys: Sequence[str] | str | None = None,
        download_ahead: int | None = None,
        download_ahead_bytes: int | None = None,
    ) -> None:
        super().__init__(transform, target_transform, decode, min_size, transforms)
        #: The fixed depth given, or None: the depth follows the link.
        self.download_ahead: int | None = None
        #: The depth the next pass starts at (a depth that follows the link: where the
        #: last one ended).
        self.download_depth = START_DEPTH
        if download_ahead is not None:
            self.download_ahead = self.download_depth = check_int(
                download_ahead, "download_ahead", low=0
            )
        self.download_ahead_bytes = (
            None
            if download_ahead_bytes is None
            else check_int(download_ahead_bytes, "download_ahead_bytes", low=1)
        )
        if keys is not None and (transforms is not None or target_transform is not None):
            raise ValueError("with keys, transform runs on each image member: give no "
                             "transforms or target_transform")  # fmt: skip
        #: None, "*", or the index's names of the members to read, in order (``seg_png``)
        self.keys = selected_members(keys)
        #: Where the shards come from when not a local folder (None for a folder).
        self.transport: Transport | None = (
            connect(str(path), cache_dir=cache_dir, cache_limit=cache_limit,
                    options=storage_options)
            if is_remote(path)
            else None
        )  # fmt: skip
        self.path: Path | str
        #: Where the member tables are, when not beside the shards (a kept scan's folder).
        self._tables_folder: Path | None = None
        if self.transport is not None:
            self.path = self.transport.url
            self.shards, self.meta = self.transport.index()
        else:
            check_cache(cache_dir, cache_limit)  # a remote source's cache checks its own
            self.path = Path(path)
            if not self.path.is_dir():
                raise FileNotFoundError(f"{self.path}: no such shard folder")
            unfinished = (self.path / PROGRESS).exists()
            if not (self.path / INDEX).exists() and not unfinished and any(self.path.glob("*.tar")):
                self.shards, self.meta, self._tables_folder = scanned_index(  # WebDataset's
                    self.path, cache_dir
                )
            else:
                self.shards, self.meta = load_index(self.path)
        self.classes = self.meta.get("classes")
        self._say_what_is_left_out()
        # the first global index of each shard: a binary search finds a sample's shard
        self._starts: list[int] = np.cumsum([0] + [shard.count for shard in self.shards]).tolist()
        self._files: dict[int, int] = {}  # shard number -> descriptor, in this process
        self._passes = 0  # passes begun by fetch_ahead: only the last one's end closes
        self._tables: OrderedDict[int, MemberTable] = OrderedDict()  # shard -> its members
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self._starts[-1]

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, place in the shard)`` of sample ``index``."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} of a ShardedDataset of {len(self)} samples")
        index %= len(self)
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def shard_range(self, shard: int) -> range:
        """The sample indices shard number ``shard`` holds."""
        return range(self._starts[shard], self._starts[shard + 1])

    def fetch_ahead(self, order: list[int]) -> BucketPass | None:
        """A pass over ``order`` (sample indices, in the order they will be read) from
        object storage: its shards downloaded into the node's cache ahead of the reader
        (with a depth to download ahead); the loader says how far it has handed the order
        out (``reached(position)``) and ends the pass (``stop()``), which lets go of the
        shards this process opened. None from a folder."""
        if self.transport is None:
            return None
        downloads = None
        if self.download_depth or self.download_ahead_bytes:
            grows_to = None
            if self.download_ahead is None:  # the depth follows the link
                grows_to = max(self.download_depth,
                               deepest(self.transport.cache_limit, self.shards))  # fmt: skip
            downloads = download_ahead(
                self.transport,
                self.shards,
                self._starts,
                order,
                ahead=self.download_depth,
                ahead_bytes=self.download_ahead_bytes,
                grows_to=grows_to,
            )
        self._passes += 1
        return BucketPass(self, self._passes, downloads)

    def _close_shards(self, *, evicted_only: bool = False) -> None:
        """Close this process's descriptors of the shards (``evicted_only``: of those the
        cache has evicted since, whose space they hold); the next read opens anew."""
        for shard, descriptor in list(self._files.items()):
            if not evicted_only or os.fstat(descriptor).st_nlink == 0:
                del self._files[shard]
                os.close(descriptor)

    def shard_of(self, index: int) -> int:
        return self.locate(index)[0]

    def members(self, shard: int) -> MemberTable:
        """Shard number ``shard``'s samples (keys and members): inline in an index of
        version 1 or 2, or its member table, read and checked on first use and kept (at
        most ``CACHED_TABLES`` in a process, the least recently used dropped past it)."""
        self._own_process()
        table = self._tables.pop(shard, None)
        if table is None:
            table = self._read_table(shard)
            if len(self._tables) >= CACHED_TABLES:
                self._tables.popitem(last=False)
        self._tables[shard] = table
        return table

    def _read_table(self, shard: int) -> MemberTable:
        facts = self.shards[shard]
        where = table_place(str(self.path), facts)
        if facts.table_inside:  # from the descriptor its samples are read through
            return checked_table(table_at_end(self._descriptor(shard), facts, where), where, facts)
        if self.transport is not None and facts.samples is None:
            return checked_table(self.transport.table(facts), where, facts)
        return load_table(self._tables_folder or Path(self.path), facts)

    def _own_process(self) -> None:
        if os.getpid() != self._pid:  # a forked worker: its own descriptors and tables
            self._files, self._tables, self._pid = {}, OrderedDict(), os.getpid()

    def _read(self, shard: int, member: Member) -> bytes:
        descriptor = self._descriptor(shard)
        data = os.pread(descriptor, member.size, member.offset)
        if len(data) != member.size:
            raise ShardIndexError(
                f"{self._where(shard)}: {member.extension} member cut short "
                f"({len(data)} of {member.size} bytes at {member.offset})"
            )
        return data

    def _descriptor(self, shard: int) -> int:
        """This process's descriptor of shard ``shard``, opened on first use (one open,
        and from a bucket one lock of the shard, serves its table and its samples)."""
        self._own_process()
        descriptor = self._files.pop(shard, None)
        if descriptor is None:
            if self.transport is not None:  # a new shard: let go of the evicted ones
                self._close_shards(evicted_only=True)
            descriptor = self._open(shard)
            if len(self._files) >= OPEN_SHARDS:  # the least recently read goes
                os.close(self._files.pop(next(iter(self._files))))
        self._files[shard] = descriptor  # last: the most recently read
        return descriptor

    def _open(self, shard: int) -> int:
        if self.transport is not None:  # opened under the shard's lock, in the cache
            return self.transport.open(self.shards[shard])
        return os.open(Path(self.path) / self.shards[shard].name, os.O_RDONLY)

    def _local_file(self, shard: int) -> Path:
        if self.transport is not None:  # fetched into the cache first, its hash checked
            return self.transport.local_path(self.shards[shard])
        return Path(self.path) / self.shards[shard].name

    def _where(self, shard: int) -> str:
        return f"{self.path}/{self.shards[shard].name}"

    def _say_what_is_left_out(self) -> None:
        """Warn once if ``(image, label)`` leaves members out (captions, metadata): the
        first shard's extensions tell, without reading any member table."""
        first = next((shard.extensions for shard in self.shards if shard.count), ())
        others = sorted(set(first) - _READ_BY_DEFAULT)
        if self.keys is None and others:
            warnings.warn(
                f"{self.path}: each sample also holds {', '.join(others)}, which (image, "
                f"label) leaves out: ShardedDataset(..., keys=('jpg', '{others[0]}')) "
                "returns them, keys='*' every member",
                stacklevel=3,
            )

    def _value(self, shard: int, member: Member, source: str) -> Any:
        """A member decoded by its extension (an image as ``decode`` says, then
        ``transform``)."""

        def image(data: bytes) -> Any:
            loaded = self._load(data, source=source)
            return self._finish(loaded, None, source)[0]

        data = self._read(shard, member)
        return decode_member(member.extension, data, source, load_image=image)

    def _selected(self, shard: int, members: dict[str, Member], source: str) -> Any:
        """``keys``' members in their order, or every member by extension (``'*'``)."""
        if self.keys == "*":
            return {ext: self._value(shard, member, source) for ext, member in members.items()}
        missing = [ext for ext in self.keys or () if ext not in members]
        if missing:
            raise ShardIndexError(f"{source}: no {missing[0]} member (it has {sorted(members)})")
        return tuple(self._value(shard, members[ext], source) for ext in self.keys or ())

    def __getitem__(self, index: int) -> Any:
        shard, place = self.locate(index)
        table = self.members(shard)
        key, members = table.key(place), table.members(place)
        source = f"{self._where(shard)}:{key}"
        if self.keys is not None:
            return self._selected(shard, members, source)
        found = [members[ext] for ext in IMAGES if ext in members]
        if not found:
            raise ShardIndexError(f"{source}: no image member among {sorted(members)}")
        image = self._load(self._read(shard, found[0]), source=source)
        target: Any = self._value(shard, members["cls"], source) if "cls" in members else None
        if "fastload" in members:
            try:
                record = unpack_record(self._read(shard, members["fastload"]), what=source)
            except RecordFormatError as error:
                raise ShardIndexError(str(error)) from None
            if record.fields:
                target = fields_target(record.fields, decoded_size(image, source), what=source)
            elif record.label is not None:
                target = record.label
        return self._finish(image, target, source)

    def verify(self) -> None:
        """Check that the index lists each shard once, then, shard by shard, that no two
        of its members share a byte and its SHA-256 is the index's; raise naming the
        first finding."""
        listed = Counter(shard.name for shard in self.shards)
        for name, times in listed.items():
            if times > 1:
                raise ShardIndexError(
                    f"{self.path}: shard {name} is listed {times} times in the index"
                )
        try:
            for number, shard in enumerate(self.shards):  # shard by shard: each fetched once
                self._check_overlaps(number)
                if file_sha256(self._local_file(number)) != shard.sha256:
                    raise ShardIndexError(
                        f"{self._where(number)}: its SHA-256 differs from the index's"
                    )
        finally:
            self._close_shards()  # the tables' reads opened every shard

    def _check_overlaps(self, number: int) -> None:
        """No two members of shard ``number`` share a byte (its table read and checked)."""
        table = self._read_table(number)  # not kept: verify reads every table once
        used = np.flatnonzero(table.sizes > 0)
        order = used[np.argsort(table.offsets[used], kind="stable")]
        ends = table.offsets[order] + table.sizes[order]
        clash = np.flatnonzero(table.offsets[order][1:] < ends[:-1])
        if clash.size:
            first, second = (int(order[clash[0]]), int(order[clash[0] + 1]))
            raise ShardIndexError(
                f"{self._where(number)}: members {self._member_name(table, first)} and "
                f"{self._member_name(table, second)} overlap"
            )

    @staticmethod
    def _member_name(table: MemberTable, member: int) -> str:
        sample = int(np.searchsorted(table.first, member, side="right")) - 1
        return f"{table.key(sample)}.{table.extensions[int(table.extension[member])]}"

    def __getstate__(self) -> dict[str, Any]:
        # descriptors and member tables stay in their process: O(shards) bytes pickled
        return {**super().__getstate__(), "_files": {}, "_tables": OrderedDict()}

    def __del__(
        self,
        _getpid: Callable[[], int] = os.getpid,
        _close: Callable[[int], None] = os.close,
    ) -> None:
        # os's functions bound at definition: at interpreter exit this may run after the
        # module's globals were cleared (os set to None)
        if getattr(self, "_pid", None) == _getpid():
            for descriptor in getattr(self, "_files", {}).values():
                _close(descriptor)

    def __repr__(self) -> str:
        return f"ShardedDataset({str(self.path)!r}, samples={len(self)}, shards={len(self.shards)})"


class BucketPass:
    """A pass over a shard set in object storage, as a loader drives it
    (:meth:`ShardedDataset.fetch_ahead`): its download-ahead, if any, and at its end the
    shards its process opened let go, unless a later pass has begun (a pass left
    unfinished and collected later must not close the next one's shards)."""

    def __init__(
        self, dataset: ShardedDataset, number: int, downloads: DownloadAhead | None
    ) -> None:
        self.dataset, self.number, self.downloads = dataset, number, downloads

    def reached(self, position: int) -> None:
        if self.downloads is not None:
            self.downloads.reached(position)

    def stop(self) -> None:
        try:
            if self.downloads is not None:
                self.downloads.stop()
                if self.dataset.download_ahead is None:  # the next pass starts this deep
                    self.dataset.download_depth = self.downloads.ahead
        finally:
            if self.dataset._passes == self.number:
                self.dataset._close_shards()
