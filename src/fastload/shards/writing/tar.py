"""Samples as tar shards: each sample's members grouped by key (``000000123.jpg``,
``000000123.cls``, and ``000000123.fastload`` for targets, in the pickle-free record
encoding), written under a temporary name and indexed as they are written; what the
local writer and the Ray workers both run."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fastload.decode.opencv import ImageDecodeError, is_jpeg
from fastload.records.captions import CaptionedFiles
from fastload.records.format import pack_record, unpack_record
from fastload.records.sources import Encoding, Source
from fastload.shards.format.index import Member, file_sha256, shard_entry
from fastload.shards.format.layout import append_table
from fastload.shards.writing.destination import Destination

__all__ = ["write_range"]

_PNG = b"\x89PNG"


def write_range(
    items: Source,
    start: int,
    stop: int,
    target: Destination,
    names: Iterator[str],
    *,
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
    on_shard: Callable[[dict[str, Any], int, list[list[str]]], None],
) -> list[list[str]]:
    """Samples ``start`` to ``stop`` of ``items`` as shards of about ``shard_size`` bytes
    named from ``names``, each put into ``target`` when complete, then announced by
    ``on_shard(index entry, next position, samples skipped in it)``. Returns the
    samples skipped after the last shard (a range ending in bad images)."""
    writer: _ShardWriter | None = None
    skipped: list[list[str]] = []
    position = start
    try:
        while position < stop:
            if writer is None:
                writer = _ShardWriter(target.staging, next(names))
            try:
                record = unpack_record(items.record(position, encoding), what=items.name(position))
            except (ImageDecodeError, OSError) as error:
                if not skip_bad:
                    raise
                skipped.append([items.name(position), str(error)])
            else:
                members = _members(record, items.name(position))
                if isinstance(items, CaptionedFiles):
                    members["txt"] = items.text(position).encode("utf-8")
                writer.add(f"{position:09d}", members)
            position += 1
            if writer.samples and (writer.size >= shard_size or position == stop):
                entry, finished = writer.close()
                target.put(finished, writer.name)
                writer = None
                on_shard(entry, position, skipped)
                skipped = []
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    if writer is not None:  # only bad images since the last shard
        writer.abandon()
    return skipped


def _members(record: Any, what: str) -> dict[str, bytes]:
    payload = record.payload
    if isinstance(payload, np.ndarray):  # a raw image: stored losslessly
        rgb = payload if payload.ndim == 2 else cv2.cvtColor(payload, cv2.COLOR_RGB2BGR)
        ok, png = cv2.imencode(".png", rgb)
        if not ok:
            raise ImageDecodeError(f"{what}: OpenCV could not encode it as PNG")
        image, extension = png.tobytes(), "png"
    else:
        image = bytes(payload)
        extension = "jpg" if is_jpeg(image) else "png" if image[:4] == _PNG else "img"
    members = {extension: image}
    label = record.label
    if isinstance(label, (int, np.integer)):
        members["cls"] = str(int(label)).encode()
    if record.fields or (label is not None and "cls" not in members):
        members["fastload"] = pack_record(
            b"", None if "cls" in members else label, record.fields or None
        )
    return members


class _ShardWriter:
    """One tar being written under a temporary name, the offsets of its members kept."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        # an attempt of its own: a Ray task run again may overlap the one it replaces
        self.temporary = folder / f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        # closed by close() or abandon(): a shard outlives one call
        self.tar = tarfile.open(self.temporary, "w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        self.samples: list[tuple[str, dict[str, Member]]] = []

    @property
    def size(self) -> int:
        return self.tar.offset

    def add(self, key: str, members: dict[str, bytes]) -> None:
        spans = {}
        for extension, data in members.items():
            info = tarfile.TarInfo(f"{key}.{extension}")
            info.size, info.mode = len(data), 0o444
            header = len(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
            start = self.tar.offset  # the data follows this member's header
            self.tar.addfile(info, io.BytesIO(data))
            spans[extension] = Member(extension, start + header, len(data))
        self.samples.append((key, spans))

    def abandon(self) -> None:
        """An interrupted shard: nothing of it stays (a resume writes it again)."""
        self.tar.close()
        self.temporary.unlink(missing_ok=True)

    def close(self) -> tuple[dict[str, Any], Path]:
        """The shard's index entry, and its complete file, its member table at its end
        (still under the temporary name: the destination puts it)."""
        self.tar.close()
        append_table(self.temporary, self.samples)
        entry = shard_entry(
            self.name, self.temporary.stat().st_size, file_sha256(self.temporary), self.samples
        )
        return entry, self.temporary
