"""LMDBDataset: a map-style dataset over a fastload LMDB file, safe with any worker setup."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import lmdb
from fastload.datasets.base import ImageDataset
from fastload.decode.opencv import DecodeMode, as_output, decoded_size
from fastload.lmdb.store import close_reader, read_meta, read_transaction, record_entries
from fastload.records.format import (
    PROGRESS_KEY,
    Record,
    RecordFormatError,
    index_key,
    unpack_record,
)
from fastload.records.targets import fields_target
from fastload.seeds import seeded_rows

__all__ = ["LMDBDataset"]


class LMDBDataset(ImageDataset):
    """Images and labels (or detection and segmentation targets) from a database
    written by :func:`fastload.write_lmdb`.

    The dataset holds only the path and the metadata: each process opens the database
    itself on first use (read-only, no lock file, so no reader-slot limit), which makes
    it safe to touch before workers fork and lets it pickle for the ``spawn`` start
    method. Records are parsed without pickle, so a database from someone else cannot
    run code.

    A database with fields (boxes, masks, ...) gives ``(image, target)`` with
    ``target`` a dict as torchvision's detection datasets give it: ``BoundingBoxes``
    (with the image's size as canvas), ``Mask``, ``KeyPoints`` and plain tensors.

    Args:
        path: The database file.
        transform: Called on the image (and its output returned in its place).
        target_transform: Called on the label or target.
        transforms: Called on ``(image, target)`` together, returning both: a
            torchvision v2 transform for detection or segmentation. Not with
            ``transform`` or ``target_transform``.
        decode: ``"numpy"``: HWC uint8 RGB ndarray, what albumentations takes;
            ``"tensor"``: CHW uint8 tensor; ``None``: the encoded file bytes as a 1-D
            uint8 tensor, for decoding later (on the GPU). Records stored as raw arrays
            are returned as arrays (or CHW tensors) in every mode.
        min_size: The smallest image your transform needs (an int for both sides, or
            ``(h, w)``): JPEGs at least twice as large are decoded at 1/2, 1/4 or 1/8
            scale, which is faster (see :func:`fastload.decode.opencv.decode_image`).
            Not for databases with fields: boxes and masks are at full scale.
        readahead: OS readahead on the memory map. On (the default) reads an image
            record, which spans many pages, in one go (measured with a cold cache in
            benchmarks/lmdb_vs_files.py). Off only pays for records of a page or two in
            a database much larger than RAM.
        check: Verify each record's CRC-32 as it is read (about 2% of a JPEG's decode),
            so that a damaged or tampered record raises a ``RecordFormatError`` naming it
            instead of giving a wrong image, label or target.

    Example:
        >>> import tempfile, fastload
        >>> folder = fastload.make_image_folder(
        ...     tempfile.mkdtemp(), num_classes=2, images_per_class=1
        ... )
        >>> _ = fastload.write_lmdb(folder, folder / "db", num_workers=0, progress=False)
        >>> dataset = LMDBDataset(folder / "db")
        >>> image, label = dataset[1]
        >>> len(dataset), image.shape, label, dataset.classes
        (2, (375, 500, 3), 1, ['class_00', 'class_01'])
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        decode: DecodeMode = "numpy",
        min_size: int | tuple[int, int] | None = None,
        readahead: bool = True,
        transforms: Callable[[Any, Any], tuple[Any, Any]] | None = None,
        check: bool = True,
    ) -> None:
        super().__init__(transform, target_transform, decode, min_size, transforms)
        self.path = Path(path)
        self._path = os.fspath(path)
        self.readahead = readahead
        self.check = check
        try:
            txn = read_transaction(self._path, readahead=readahead, fresh=True)
            self.meta = read_meta(txn, self.path)
            self._count = self._checked_count(txn)
        except Exception:
            close_reader(self.path)  # keep nothing open: the next step may be a --resume
            raise
        if min_size is not None and self.fields:
            raise ValueError(
                f"{self.path}: min_size decodes images smaller, its fields {self.fields} are "
                "at full scale; leave min_size out"
            )

    def _checked_count(self, txn: lmdb.Transaction) -> int:
        """The metadata's record count, checked against the file: a count that lies would
        make a sampler allocate for records that do not exist."""
        count = self.meta.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RecordFormatError(f"{self.path}: metadata count {count!r} is not a count")
        bookkeeping = 1 + (txn.get(PROGRESS_KEY) is not None)  # the metadata (and progress)
        stored = record_entries(self._path) - bookkeeping
        if stored != count or (count and txn.get(index_key(count - 1)) is None):
            raise RecordFormatError(
                f"{self.path}: metadata says {count:,} records, the file holds {stored:,}; "
                "the database is damaged (verify it, or convert again)"
            )
        return count

    @property
    def fields(self) -> list[str]:
        """The names of each record's target fields; empty for a database of labels."""
        return list(self.meta.get("fields") or [])

    @property
    def classes(self) -> list[str]:
        return list(self.meta.get("classes") or [])

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return self._count

    def _transaction(self) -> lmdb.Transaction:
        # Looked up at every read, never stored: after fork, pickling for spawn, or a
        # writer closing it, the next read opens the file afresh in this process.
        return read_transaction(self._path, readahead=self.readahead)

    def record(self, index: int, *, check: bool = False, copy: bool = True) -> Record:
        """The parsed record at ``index`` (payload, label, CRC), not decoded; ``check``
        verifies the payload's CRC-32. ``copy=False`` returns encoded bytes as a view
        into the memory map: use it at once, it is not valid after the file is closed."""
        return self._record(self._transaction(), index, check=check, copy=copy)

    def _record(
        self, txn: lmdb.Transaction, index: int, *, check: bool = False, copy: bool = True
    ) -> Record:
        count = self._count
        if not -count <= index < count:
            raise IndexError(f"index {index} is out of range for {self.path} ({count} records)")
        key = index_key(index % count)
        value = txn.get(key)
        if value is None:
            raise KeyError(f"{self.path}: record {key.decode()} is missing")
        return unpack_record(value, what=self._path + ":" + key.decode(), check=check, copy=copy)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self._sample(self._transaction(), index)

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """A batch of samples: DataLoader (and FastLoader) fetch through this; under
        ``FastLoader(seed=...)`` each sample draws from its own keyed seed."""
        txn = self._transaction()
        return [self._sample(txn, int(indices[row])) for row in seeded_rows(len(indices))]

    def _sample(self, txn: lmdb.Transaction, index: int) -> tuple[Any, Any]:
        # decoded or copied before the next read
        record = self._record(txn, index, check=self.check, copy=False)
        payload, source = record.payload, f"{self._path}:{index}"
        if isinstance(payload, np.ndarray):  # stored as a raw array
            if payload.dtype != np.uint8 or payload.ndim not in (2, 3) or not payload.size:
                raise RecordFormatError(
                    f"{source}: a stored image of shape {payload.shape} and dtype "
                    f"{payload.dtype}, not a (H, W[, C]) uint8 image"
                )
            image = as_output(payload, self.decode)
            size = payload.shape[:2]
        else:
            image = self._load(payload, source=source)
            size = decoded_size(image, source)
        target: Any = record.label
        if record.fields:
            target = fields_target(record.fields, size, what=source)
        return self._finish(image, target, source)

    def __repr__(self) -> str:
        return f"LMDBDataset({str(self.path)!r}, records={len(self)}, decode={self.decode!r})"
