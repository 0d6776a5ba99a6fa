"""Writing a shard set: samples as tar members grouped by key (``000000123.jpg``,
``000000123.cls``, and ``000000123.fastload`` for targets, in the pickle-free record
encoding of the LMDB files), shards of about ``shard_size`` bytes, the index last.

A shard is written to a temporary name and put into the destination when complete
(:mod:`fastload.shards.destination`); the progress lists the finished ones, so
``resume=True`` after an interruption (even ``kill -9``) keeps them and goes on from the
first unfinished sample, re-encoding nothing finished.
"""

from __future__ import annotations

import io
import itertools
import os
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fastload._checks import check_int
from fastload.decode.opencv import ImageDecodeError, is_jpeg
from fastload.records.choose import make_source
from fastload.records.format import pack_record, unpack_record
from fastload.records.sources import Encoding, Source
from fastload.shards.captions import CaptionedFiles, captioned_source
from fastload.shards.destination import Destination, destination
from fastload.shards.index import INDEX, Member, file_sha256, shard_entry
from fastload.shards.remote import S3Shards

__all__ = ["write_shards"]

_PNG = b"\x89PNG"


def write_shards(
    source: Any,
    destination: str | os.PathLike[str],
    *,
    shard_size: int = 256 << 20,
    resume: bool = False,
    skip_bad: bool = False,
    resize: int | None = None,
    quality: int | None = None,
    annotations: str | os.PathLike[str] | None = None,
    instance_masks: bool = False,
    masks: str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    ray: bool = False,
    parts: int | None = None,
    captions: bool = False,
) -> dict[str, Any]:
    """Write ``source`` (an image folder, a list of ``(path, label)``, any Dataset, a COCO
    folder with ``annotations``, a segmentation folder with ``masks``: what
    :func:`fastload.write_lmdb` reads) as tar shards into the folder ``destination``, or
    to ``s3://bucket/prefix`` (each shard uploaded when complete, the index last; the AWS
    variables and ``storage_options`` configure the client);
    ``resize`` (longest side) and ``quality`` re-encode as JPEG, as for LMDB.

    ``captions=True``: image-text pairs, each sample's caption a ``txt`` member beside
    its image (:func:`~fastload.shards.captions.captioned_source`: a folder where
    ``cat.jpg`` has ``cat.txt`` beside it, or a ``.csv``/``.jsonl`` of path and caption);
    read back with ``ShardedDataset(..., keys=("jpg", "txt"))``.

    ``ray=True`` spreads the conversion over a Ray cluster (``ray.init()``'s: the one
    ``RAY_ADDRESS`` names, or a local one): ``parts`` contiguous ranges of samples
    (default: four per CPU of the cluster), each written as whole shards by one task,
    the index committed by this process after all. The source must be readable by
    every worker (a shared folder, a bucket, a Dataset that pickles).

    Returns the index's metadata. Raises ``FileExistsError`` for a destination that
    holds a shard set or a conversion in progress (pass ``resume=True`` for the latter:
    finished shards are kept, neither re-encoded nor re-uploaded).

    Example:
        >>> from fastload.tools.shapes import ShapesDetection
        >>> import tempfile
        >>> meta = write_shards(ShapesDetection(3, size=(32, 32)), tempfile.mkdtemp())
        >>> meta["samples"], meta["fields"]
        (3, ['boxes', 'labels', 'masks'])
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    if parts is not None and not ray:
        raise ValueError("parts: the parts are Ray's (ray=True)")
    if parts is not None:
        check_int(parts, "parts", low=1)
    target = _destination(destination, storage_options)
    try:
        if captions and (annotations or masks) is not None:
            raise ValueError("captions are image-text pairs: give no annotations or masks")
        items = (
            captioned_source(source) if captions
            else make_source(source, annotations, instance_masks, masks)
        )  # fmt: skip
        what = {"description": items.description, "samples": len(items), "resize": resize,
                "quality": quality, "shard_size": shard_size}  # fmt: skip
        progress = _progress(target, what, resume)
        encoding = Encoding(resize, quality)
        if ray:
            from fastload.shards.on_ray import convert_on_ray

            shards, skipped = convert_on_ray(
                items, target, progress, encoding=encoding, shard_size=shard_size,
                skip_bad=skip_bad, parts=parts, options=storage_options,
            )  # fmt: skip
        else:
            shards, skipped = _convert(items, target, progress, encoding, shard_size, skip_bad)
        meta = {
            "source": items.description,
            "samples": sum(len(shard["samples"]) for shard in shards),
            "classes": items.classes,
            "fields": items.fields,
            "skipped": skipped,
        }
        target.commit(shards, meta)
    finally:
        target.close()
    return meta


def _destination(where: str | os.PathLike[str], options: dict[str, Any] | None) -> Destination:
    target = destination(where, options)
    if target.has_index():
        target.close()
        raise FileExistsError(f"{target}: already holds a shard set ({INDEX})")
    return target


def _progress(target: Destination, what: dict[str, Any], resume: bool) -> dict[str, Any]:
    """The unfinished conversion's progress, checked to be of the same source, length,
    encoding and shard size; for a new one, ``what`` it converts, saved at once (a shard
    set with a progress is never taken for a finished or a WebDataset one)."""
    progress = target.progress()
    if progress is None:
        target.save_progress(what)
        return dict(what)
    if not resume:
        raise FileExistsError(
            f"{target}: holds an unfinished conversion: pass resume=True (--resume) to finish it"
        )
    differs = [f"{key} {progress.get(key)!r}, now {value!r}" for key, value in what.items()
               if progress.get(key) != value]  # fmt: skip
    if differs:
        raise ValueError(
            f"{target}: the unfinished conversion differs from this one: {'; '.join(differs)}"
        )
    target.clear_unfinished()
    return progress


def _convert(
    items: Source,
    target: Destination,
    progress: dict[str, Any],
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """In this process, shard after shard, each recorded in the progress when finished."""
    if "parts" in progress:
        raise ValueError(f"{target}: the unfinished conversion ran on Ray: resume it with ray=True")
    shards: list[dict[str, Any]] = progress.get("shards", [])
    skipped: list[list[str]] = progress.get("skipped", [])

    def finished(entry: dict[str, Any], position: int, bad: list[list[str]]) -> None:
        target.record_shard(len(shards), {"entry": entry, "next": position, "skipped": bad})
        shards.append(entry)
        skipped.extend(bad)

    names = (f"shard-{number:06d}.tar" for number in itertools.count(len(shards)))
    rest = write_range(items, progress.get("next", 0), len(items), target, names,
                       encoding=encoding, shard_size=shard_size, skip_bad=skip_bad,
                       on_shard=finished)  # fmt: skip
    skipped.extend(rest)
    return shards, skipped


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


def upload(folder: Path, url: str, options: dict[str, Any] | None = None) -> None:
    """The shard set in ``folder`` to ``url``, the index after every shard."""
    remote = S3Shards(url, options=options)
    client = remote.client()
    names = sorted(name for name in os.listdir(folder) if name.endswith(".tar"))
    for name in [*names, INDEX]:
        client.upload_file(str(folder / name), remote.bucket, remote.key(name))


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
        """The shard's index entry, and its complete file (still under the temporary
        name: the destination puts it)."""
        self.tar.close()
        entry = shard_entry(
            self.name, self.temporary.stat().st_size, file_sha256(self.temporary), self.samples
        )
        return entry, self.temporary
