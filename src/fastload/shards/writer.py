"""Writing a shard set: samples as tar members grouped by key (``000000123.jpg``,
``000000123.cls``, and ``000000123.fastload`` for targets, in the pickle-free record
encoding of the LMDB files), shards of about ``shard_size`` bytes, the index last.

A shard is written to a temporary name and renamed when complete; a progress file lists
the finished ones, so ``resume=True`` after an interruption (even ``kill -9``) keeps
them and goes on from the first unfinished sample, re-encoding nothing finished.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fastload.datasets.decode import ImageDecodeError, is_jpeg
from fastload.lmdb.format import pack_record, unpack_record
from fastload.lmdb.sources import Encoding
from fastload.lmdb.writer import make_source
from fastload.shards.index import INDEX, PROGRESS, Member, file_sha256, shard_entry, write_index
from fastload.shards.remote import S3Shards, is_remote

__all__ = ["write_shards"]

_PNG = b"\x89PNG"


def write_shards(
    source: Any,
    destination: str | os.PathLike,
    *,
    shard_size: int = 256 << 20,
    resume: bool = False,
    skip_bad: bool = False,
    resize: int | None = None,
    quality: int | None = None,
    annotations: str | os.PathLike | None = None,
    instance_masks: bool = False,
    masks: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write ``source`` (an image folder, a list of ``(path, label)``, any Dataset, a COCO
    folder with ``annotations``, a segmentation folder with ``masks``: what
    :func:`fastload.write_lmdb` reads) as tar shards into the folder ``destination``, or
    to ``s3://bucket/prefix`` (written locally, then uploaded, the index last; the AWS
    variables configure the client);
    ``resize`` (longest side) and ``quality`` re-encode as JPEG, as for LMDB.

    Returns the index's metadata. Raises ``FileExistsError`` for a destination that
    holds a shard set or a conversion in progress (pass ``resume=True`` for the latter).

    Example:
        >>> from fastload.tools.shapes import ShapesDetection
        >>> import tempfile
        >>> meta = write_shards(ShapesDetection(3, size=(32, 32)), tempfile.mkdtemp())
        >>> meta["samples"], meta["fields"]
        (3, ['boxes', 'labels', 'masks'])
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    if is_remote(destination):  # written here, then uploaded: shards first, the index last
        with tempfile.TemporaryDirectory(prefix="fastload-shards-") as staging:
            meta = write_shards(
                source, staging, shard_size=shard_size, skip_bad=skip_bad, resize=resize,
                quality=quality, annotations=annotations, instance_masks=instance_masks,
                masks=masks,
            )  # fmt: skip
            upload(Path(staging), str(destination))
        return meta
    folder = Path(destination)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / INDEX).exists():
        raise FileExistsError(f"{folder}: already holds a shard set ({INDEX})")
    progress_path = folder / PROGRESS
    if progress_path.exists() and not resume:
        raise FileExistsError(
            f"{folder}: holds an unfinished conversion: pass resume=True (--resume) to finish it"
        )
    items = make_source(source, annotations, instance_masks, masks)
    progress = json.loads(progress_path.read_text()) if resume and progress_path.exists() else {}
    if progress and progress.get("description") != items.description:
        raise ValueError(
            f"{folder}: the unfinished conversion is of {progress.get('description')}, "
            f"not of {items.description}"
        )
    shards: list[dict[str, Any]] = progress.get("shards", [])
    skipped: list[list[str]] = progress.get("skipped", [])
    position = progress.get("next", 0)
    encoding = Encoding(resize, quality)
    writer: _ShardWriter | None = None
    try:
        while position < len(items):
            if writer is None:
                writer = _ShardWriter(folder, f"shard-{len(shards):06d}.tar")
            try:
                record = unpack_record(items.record(position, encoding), what=items.name(position))
            except (ImageDecodeError, OSError) as error:
                if not skip_bad:
                    raise
                skipped.append([items.name(position), str(error)])
            else:
                writer.add(f"{position:09d}", _members(record, items.name(position)))
            position += 1
            if writer.size >= shard_size or position == len(items):
                shards.append(writer.close())
                writer = None
                progress_path.write_text(json.dumps({
                    "description": items.description, "next": position, "shards": shards,
                    "skipped": skipped,
                }))  # fmt: skip
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    meta = {
        "source": items.description,
        "samples": sum(len(shard["samples"]) for shard in shards),
        "classes": items.classes,
        "fields": items.fields,
        "skipped": skipped,
    }
    write_index(folder, shards, meta)
    progress_path.unlink(missing_ok=True)
    return meta


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
        self.temporary = folder / f".{name}.tmp"
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

    def close(self) -> dict[str, Any]:
        self.tar.close()
        digest = file_sha256(self.temporary)
        os.replace(self.temporary, self.folder / self.name)
        size = (self.folder / self.name).stat().st_size
        return shard_entry(self.name, size, digest, self.samples)
