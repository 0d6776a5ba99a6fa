"""``write_lmdb``: an image folder, a list of files or a Dataset into one LMDB file.

Safe: the map grows by itself, records commit in batches with the conversion's
progress in the same transaction, so a conversion killed at any point (even by
``kill -9``) resumes where it stopped and ends with every record exactly once.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from tqdm import tqdm

import lmdb
from fastload._checks import check_int
from fastload.decode.opencv import ImageDecodeError
from fastload.lmdb.store import (
    close_reader,
    is_lmdb_file,
    lock_path,
    open_for_writing,
    read_meta,
)
from fastload.lmdb.workers import Died, WorkerDiedError, converted_items, death
from fastload.records.coco import CocoSource
from fastload.records.conversion import Conversion, SourceOptions, require_samples
from fastload.records.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_KEY,
    PROGRESS_KEY,
    RESUME,
    RecordFormatError,
    decode_meta,
    encode_meta,
    index_key,
)
from fastload.records.masks import MaskFolderSource
from fastload.records.sources import DatasetSource, Encoding, FileSource, Source
from fastload.records.targets import TargetError
from fastload.system import available_cpus

__all__ = ["write_lmdb"]

logger = logging.getLogger(__name__)

DEFAULT_MAP_SIZE = 64 << 20  # grows by doubling; a guess is never needed
COMMIT_BYTES = 64 << 20


# --- the database ----------------------------------------------------------------------------


def _commit(
    env: lmdb.Environment, puts: list[tuple[bytes, bytes]], delete: bytes | None = None
) -> None:
    """Write ``puts`` in one transaction; on MapFullError double the map and redo it."""
    while True:
        try:
            with env.begin(write=True) as txn:
                for key, value in puts:
                    txn.put(key, value)
                if delete is not None:
                    txn.delete(delete)
        except lmdb.MapFullError:
            size = env.info()["map_size"] * 2
            logger.info(
                "LMDB map full: growing it to %d MiB and redoing the transaction", size >> 20
            )
            env.set_mapsize(size)
        except lmdb.Error as error:  # a full disk, an I/O error: the transaction is undone
            raise OSError(
                f"{env.path()}: writing failed ({error}); is the disk full? The records "
                f"committed before are kept: make room and run again with {RESUME}"
            ) from error
        else:
            return


@dataclass
class Progress:
    """What a conversion has done, committed with the records it describes."""

    fingerprint: dict[str, Any]
    next_position: int = 0
    count: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    last_name: str | None = None  # the item at next_position - 1: what a resume checks

    def encode(self) -> bytes:
        return json.dumps(self.__dict__).encode()


def _fingerprint(source: Source, encoding: Encoding) -> dict[str, Any]:
    """What must not change between a conversion and its resume. Items after the point
    reached may: removing the bad file a conversion stopped at is how to go on."""
    return {
        "source": source.description,
        "first": source.name(0) if len(source) else None,
        "resize": encoding.resize,
        "quality": encoding.quality,
    }


def _start(env: lmdb.Environment, path: Path, items: Source, encoding: Encoding) -> Progress | None:
    """The progress to continue from, or None when the database is already complete."""
    fingerprint = _fingerprint(items, encoding)
    with env.begin() as txn:
        meta, progress, entries = txn.get(META_KEY), txn.get(PROGRESS_KEY), txn.stat()["entries"]
    if meta is not None:
        done = decode_meta(meta, what=str(path)).get("fingerprint")
        if done is not None and done != fingerprint:
            raise ValueError(
                f"{path}: already complete, converted from a different source or settings "
                f"({done}); now {fingerprint}"
            )
        return None
    if progress is None:
        if entries:
            raise RecordFormatError(
                f"{path}: an LMDB database that fastload did not write; not resuming"
            )
        return Progress(fingerprint)
    state = Progress(**json.loads(progress))
    last = state.next_position - 1
    moved = last >= 0 and (last >= len(items) or items.name(last) != state.last_name)
    if state.fingerprint != fingerprint or moved:
        raise ValueError(
            f"{path}: cannot resume, it was started from a different source or settings "
            f"({state.fingerprint}, item {last} {state.last_name}); now {fingerprint}"
            + (f", item {last} {items.name(last)}" if 0 <= last < len(items) else "")
        )
    logger.info(
        "%s: resuming at item %d (%d records written)", path, state.next_position, state.count
    )
    return state


def write_lmdb(
    source: Any,
    path: str | os.PathLike[str],
    *,
    num_workers: int | None = None,
    commit_every: int = 256,
    map_size: int = DEFAULT_MAP_SIZE,
    progress: bool = True,
    **options: Unpack[SourceOptions],
) -> dict[str, Any]:
    """Convert ``source`` into the single-file LMDB database ``path``.

    Args:
        source: An image folder with class sub-folders (torchvision ImageFolder order of
            classes), a list of ``(path, label)``, or a map-style Dataset returning
            ``(image, label)`` with the image an HWC ndarray, CHW tensor or PIL image.
            A Dataset that returns ``(image, target)`` with ``target`` a dict (of
            ``tv_tensors`` and tensors, as torchvision's detection datasets give) is
            stored with the target's entries as fields. Presizing scales boxes, keypoints
            and masks with the image. Read back, fields are ``tv_tensors`` again.
        path: The database file to create.
        num_workers: Processes that read and encode (default: the CPUs available); 0 runs
            in this process.
        commit_every: Records per transaction.
        map_size: Initial LMDB map size in bytes; it doubles whenever it is full.
        progress: Show a tqdm progress bar.
        **options: What is read and how, as for ``write_shards``
            (:class:`~fastload.records.conversion.SourceOptions`): ``resume``,
            ``skip_bad``, ``resize``, ``quality``, ``annotations``, ``instance_masks``,
            ``masks``.

    Returns:
        The metadata written, as a dict.

    Raises:
        ImageDecodeError: An unreadable, corrupt or non-image file, a pipe or a device
            (skipped with ``skip_bad``).
        TargetError: A target or annotation that cannot be stored as it is: boxes not
            finite or outside the image, a polygon or RLE that does not fit it, a value
            of the wrong type (skipped with ``skip_bad``).
        WorkerDiedError: A worker process died (the out-of-memory killer): the item it
            was converting is named.
        FileExistsError, IsADirectoryError, FileNotFoundError: ``path`` exists (without
            ``resume``), is a folder, or is in a folder that does not exist.

    The records converted before an error are kept: ``resume=True`` goes on from the
    item named.

    Example:
        >>> import tempfile, fastload
        >>> folder = fastload.make_image_folder(
        ...     tempfile.mkdtemp(), num_classes=2, images_per_class=2
        ... )
        >>> meta = write_lmdb(folder, folder / "train.lmdb", num_workers=0, progress=False)
        >>> meta["count"], meta["classes"]
        (4, ['class_00', 'class_01'])
    """
    conversion = Conversion.of(options, "write_lmdb")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a directory; give the path of the database file to write"
        )
    if path.exists() and not conversion.resume:
        if not (path.is_file() and is_lmdb_file(path)):
            raise FileExistsError(
                f"{path} exists and is not an LMDB database; it is left as it is: give another "
                "destination"
            )
        raise FileExistsError(
            f"{path} exists; pass {RESUME} to finish an interrupted conversion, or remove it "
            "to start again"
        )
    for name, value, low, high in [
        ("commit_every", commit_every, 1, None),
        ("map_size", map_size, 1 << 12, None),
        ("num_workers", num_workers, 0, None),
    ]:
        if value is not None:
            check_int(value, name, low=low, high=high)
    items = conversion.source(source)
    _leave_out(items, path)
    require_samples(items)
    items.fields  # noqa: B018 (a Dataset's item 0 read: a bad target fails before any file)
    encoding = conversion.encoding
    num_workers = available_cpus() if num_workers is None else num_workers

    close_reader(path)  # a dataset in this process may have it open for reading
    created = not path.exists()
    env = open_for_writing(path, map_size=map_size)
    state: Progress | None = None
    discard = False
    try:
        state = _start(env, path, items, encoding)
        if state is None:
            logger.info("%s is already complete", path)
            with env.begin() as txn:
                return read_meta(txn, path)
        meta = _convert(env, items, encoding, state, skip_bad=conversion.skip_bad,
                        workers=num_workers, commit_every=commit_every,
                        progress=progress)  # fmt: skip
        env.sync()
    except BaseException:
        # A file this run made and nothing was converted into: nothing to resume, gone.
        discard = created and (state is None or (state.count == 0 and not state.skipped))
        raise
    finally:
        env.close()
        lock_path(path).unlink(missing_ok=True)  # readers open without locks
        if discard:
            path.unlink(missing_ok=True)
    return meta


def _leave_out(items: Source, path: Path) -> None:
    """Drop the database ``path`` (and its lock file) from the items it is converted
    from: written inside the image folder, a resume would list it as an image."""
    written = [p for p in (path, lock_path(path)) if p.exists()]
    names = {p.name for p in written}

    def keep(item: str | os.PathLike[str]) -> bool:
        return Path(item).name not in names or not any(
            os.path.exists(item) and os.path.samefile(item, p) for p in written
        )

    if isinstance(items, FileSource):
        items.samples = [sample for sample in items.samples if keep(sample[0])]
    elif isinstance(items, MaskFolderSource):
        items.images = [image for image in items.images if keep(items.root / image)]


def _convert(
    env: lmdb.Environment,
    items: Source,
    encoding: Encoding,
    state: Progress,
    *,
    skip_bad: bool,
    workers: int,
    commit_every: int,
    progress: bool,
) -> dict[str, Any]:
    pending: list[tuple[bytes, bytes]] = []
    pending_bytes = 0

    def commit() -> None:
        nonlocal pending, pending_bytes
        _commit(env, [*pending, (PROGRESS_KEY, state.encode())])
        pending, pending_bytes = [], 0

    # The workers fork before the progress bar starts its thread: no lock is copied held.
    with converted_items(items, encoding, state.next_position, workers) as records:
        bar = tqdm(total=len(items), initial=state.next_position, unit="img", disable=not progress)
        with bar:
            try:
                for position, record, error in records:
                    if error is not None:
                        if not skip_bad:
                            commit()  # keep what was done: --resume continues from here
                            kind = (
                                TargetError if isinstance(error, TargetError) else ImageDecodeError
                            )
                            raise kind(
                                f"{error} (item {position} of the source; the {state.count} "
                                "records before it are kept: fix or remove the file, or pass "
                                f"skip_bad=True (--skip-bad), and run again with {RESUME})"
                            )
                        state.skipped.append({"path": items.name(position), "error": str(error)})
                        bar.set_postfix(skipped=len(state.skipped))
                    elif record is not None:
                        pending.append((index_key(state.count), record))
                        pending_bytes += len(record)
                        state.count += 1
                    state.next_position, state.last_name = position + 1, items.name(position)
                    bar.update()
                    if len(pending) >= commit_every or pending_bytes >= COMMIT_BYTES:
                        commit()
            except Died as died:
                commit()
                raise WorkerDiedError(
                    f"{items.name(died.position)}: the worker process converting it "
                    f"{death(died.exitcode)} (item {died.position} of the source; the "
                    f"{state.count} records before it are kept: run again with {RESUME}, with "
                    "fewer num_workers (--workers) if memory ran out)"
                ) from None

    fields = items.fields
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION if fields else 1,  # a version 1 reader reads labels
        "count": state.count,
        "classes": items.classes,
        "fields": fields,
        "source": items.description,
        "resize": encoding.resize,
        "quality": encoding.quality,
        "payload": "array"
        if isinstance(items, DatasetSource) and encoding == Encoding()
        else "encoded",
        "skipped": state.skipped,
        "checksum": "crc32 of each record's payload, in its header",
        "fingerprint": state.fingerprint,
    }
    if isinstance(items, CocoSource):
        meta["categories"] = items.categories
    # The last transaction: the remaining records, the metadata, and no more progress.
    _commit(env, [*pending, (META_KEY, encode_meta(meta))], delete=PROGRESS_KEY)
    return meta
