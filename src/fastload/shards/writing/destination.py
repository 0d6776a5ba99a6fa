"""Where a conversion writes its shards: a local folder, or object storage (``s3://``,
``gs://``, ``az://``).

Shards are written under a temporary name in a local staging folder and *put* once
complete: renamed into the folder, or uploaded (and the local copy removed, so a
conversion to a bucket needs room for one shard, not the set). The conversion's
progress lives beside them, as files or objects: what it converts, written once, and a
small record per finished shard (its index entry, where the next shard starts, the
samples skipped), so that saving it costs the same for the thousandth shard as for the
first, and a conversion killed with ``kill -9`` resumes on any machine without
re-encoding or re-uploading a finished shard. The index is written last.

A destination holds nothing of its user's under a name a conversion writes
(:func:`shard_name`, :func:`part_shard_name`): a new conversion is refused, naming the
file, before any work when one is there (a folder of WebDataset shards named as fastload
names them), and only then saves its progress; so a resume, with the progress there, finds
only the conversion's own shards under those names.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fastload._atomic import rename_durably, temporary_names, write_whole
from fastload.records.format import RESUME
from fastload.shards.format.index import INDEX, PROGRESS
from fastload.shards.format.layout import write_index
from fastload.shards.stores.connect import bucket, is_remote

__all__ = ["Destination", "destination", "part_shard_name", "shard_name"]

_RECORD = f"{PROGRESS}.shard-"  # + the shard's number: one finished shard's progress
_SHARD = re.compile(r"^shard-([0-9]{6,}|[0-9]{5,}-[0-9]{4,})\.tar$")  # what the writers name
# a shard being written, by its writer's temporary naming (tar.py: ``.NAME.<12 hex>.tmp``)
_UNFINISHED = re.compile(r"^\.shard-[0-9-]+\.tar\.[0-9a-f]{12}\.tmp$")
# the header or a shard's record being written (write_whole's temporary naming)
_RECORD_TEMPORARY = temporary_names(rf"{re.escape(PROGRESS)}(?:\.shard-[0-9]+)?")


def shard_name(number: int) -> str:
    """The name of shard ``number`` of a conversion in one process."""
    return f"shard-{number:06d}.tar"


def part_shard_name(part: int, number: int) -> str:
    """The name of shard ``number`` of part ``part`` of a conversion on Ray."""
    return f"shard-{part:05d}-{number:04d}.tar"


def merged(header: dict[str, Any] | None, records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The progress as one dict: the header, and the finished shards' records in order
    (``shards``, ``skipped``, ``next``)."""
    if header is None:
        return None
    if not records:
        return header
    return {**header, "next": records[-1]["next"],
            "shards": [record["entry"] for record in records],
            "skipped": [bad for record in records for bad in record["skipped"]]}  # fmt: skip


class Destination:
    """A local folder receiving a shard set."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()  # Ray's workers run in other directories
        if self.folder.exists() and not self.folder.is_dir():
            raise FileExistsError(
                f"{folder}: a file is there; shards are written into a folder (a new one, or "
                "one of a conversion to resume): give another destination"
            )
        self._made = not self.folder.exists()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file among its parents, no permission
            raise type(error)(f"{folder}: cannot make the folder ({error.strerror})") from None
        self.staging = self.folder

    def __str__(self) -> str:
        return str(self.folder)

    def has_index(self) -> bool:
        return (self.folder / INDEX).exists()

    def refuse_foreign(self) -> None:
        """Refuse a destination holding files under the names a conversion writes, before
        a new conversion begins (resumes are not checked: their progress, saved only after
        this check, makes those names the conversion's own).

        Raises:
            FileExistsError: Naming the first such file and how many there are.
        """
        taken = sorted(name for name in self._names("shard-") if _SHARD.match(name))
        if taken:
            more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
            raise FileExistsError(
                f"{self}/{taken[0]}{more}: a file a new conversion would write over, not of a "
                "fastload conversion (no index, no progress); it is left as it is: give another "
                "destination, or move those files away"
            )

    def _names(self, prefix: str) -> list[str]:
        return [path.name for path in self.folder.glob(f"{prefix}*")]

    def progress(self) -> dict[str, Any] | None:
        """The unfinished conversion's progress (:func:`merged`), or None: none here.

        Raises:
            ValueError: One of its records is empty or damaged, naming it and what to do.
        """
        if not self._holds(PROGRESS):
            return None
        names = self._record_names()
        header = self._record(PROGRESS, last=False)
        return merged(header, [self._record(name, last=name == names[-1]) for name in names])

    def _record(self, name: str, *, last: bool) -> dict[str, Any]:
        """The progress record ``name``, read. A power cut after a rename the disk had not
        got yet (a fastload before records were synced), or a file edited, leaves one empty
        or cut short: the conversion's settings, or a shard's entry, are lost with it."""
        try:
            content = json.loads(self._read(name))
        except ValueError:  # empty, cut short, not UTF-8
            content = None
        if isinstance(content, dict):
            return content
        what = "an unfinished conversion" if name == PROGRESS else "a finished shard"
        damaged = (
            f"{self._place(name)}: the progress record of {what} is empty or damaged (a crash "
            "or power cut while it was written): "
        )
        if last:  # as if killed before it was recorded: its shard is written again
            raise ValueError(
                f"{damaged}remove it and resume with {RESUME}: that shard is converted again"
            )
        raise ValueError(
            f"{damaged}the conversion cannot be resumed; remove its files from {self} "
            f"(shard-*.tar, {PROGRESS}*) and convert again"
        )

    def _holds(self, name: str) -> bool:
        return (self.folder / name).exists()

    def _read(self, name: str) -> bytes:
        return (self.folder / name).read_bytes()

    def _record_names(self) -> list[str]:
        # named by number, ending in it: not a temporary file of one half-written
        return sorted(path.name for path in self.folder.glob(f"{_RECORD}*[0-9]"))

    def _place(self, name: str) -> str:
        return str(self.folder / name)

    def clear_unfinished(self) -> None:
        """Remove the shards an interrupted conversion left half-written (a resume writes
        them again), and its progress records' temporary files."""
        # (a bucket's records are put whole: half-written ones are a folder's only)
        shards = [
            path for path in self.staging.glob(".shard-*.tmp") if _UNFINISHED.match(path.name)
        ]
        records = [
            path for path in self.staging.glob(".*.tmp") if _RECORD_TEMPORARY.fullmatch(path.name)
        ]
        # and those of a fastload before records were written by write_whole
        older = self.staging.glob(f"{_RECORD}[0-9]*[0-9].tmp")
        for leftover in [*shards, *records, *older]:
            leftover.unlink(missing_ok=True)

    def save_progress(self, progress: dict[str, Any]) -> None:
        self._write(PROGRESS, json.dumps(progress).encode())

    def record_shard(self, number: int, record: dict[str, Any]) -> None:
        """Shard ``number`` finished: its ``entry``, the ``next`` position, the samples
        ``skipped`` in it, as a record of its own."""
        self._write(f"{_RECORD}{number:06d}", json.dumps(record).encode())

    def _write(self, name: str, data: bytes) -> None:
        # whole or not at all, and on the disk before the next shard begins: a resume
        # after a power cut finds every record it was told of
        write_whole(self.folder / name, data)

    def put(self, finished: Path, name: str) -> None:
        """The complete shard ``finished`` (in ``staging``) under its name, on the disk
        before the record that lists it is written."""
        rename_durably(finished, self.folder / name)

    def commit(self, shards: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        """The index, which makes the shard set whole; the progress goes (the header
        last: until then, the set reads as unfinished)."""
        write_index(self.folder, shards, meta)
        for record in self.folder.glob(f"{_RECORD}*"):
            record.unlink(missing_ok=True)
        (self.folder / PROGRESS).unlink(missing_ok=True)

    def close(self) -> None:
        """The folder goes if this destination made it and nothing was written into it
        (a conversion refused before its first file)."""
        if self._made:
            with contextlib.suppress(OSError):  # not empty: it holds the conversion's files
                self.folder.rmdir()


class StoreDestination(Destination):
    """Object storage (``s3://``, ``gs://``, ``az://``): each shard uploaded when
    complete, the index after all."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.remote = bucket(url, options)
        self.url = self.remote.url
        if not self.remote.writable:  # refused before any work
            raise PermissionError(f"{self.url}: a web server's shards are read-only")
        self.staging = Path(tempfile.mkdtemp(prefix="fastload-shards-"))

    def __str__(self) -> str:
        return self.url

    def has_index(self) -> bool:
        return self.remote.exists(INDEX)

    def _holds(self, name: str) -> bool:
        return self.remote.exists(name)

    def _read(self, name: str) -> bytes:
        return self.remote.read(name)

    def _record_names(self) -> list[str]:
        return sorted(name for name in self.remote.names(_RECORD) if name[-1].isdigit())

    def _place(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _names(self, prefix: str) -> list[str]:
        return self.remote.names(prefix)

    def _write(self, name: str, data: bytes) -> None:
        self.remote.write(name, data)

    def put(self, finished: Path, name: str) -> None:
        self.remote.write(name, finished)
        finished.unlink()

    def commit(self, shards: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        # the tables are inside the shards: the index, put last, makes the set whole
        self.put(write_index(self.staging, shards, meta), INDEX)
        for name in [*self._record_names(), PROGRESS]:  # the header last
            self.remote.delete(name)

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def destination(
    target: str | os.PathLike[str], options: dict[str, Any] | None = None
) -> Destination:
    """The :class:`Destination` for a folder or a URL of object storage (``options``:
    the store's client's, see :mod:`fastload.shards.stores.s3` for ``s3://`` and
    :mod:`fastload.shards.stores.obstore_bucket` for the others)."""
    if is_remote(target):
        return StoreDestination(str(target), options)
    if options:
        raise ValueError("storage options are for a destination in object storage")
    return Destination(target)
