"""A Hugging Face ``datasets`` image set as a record source: each record keeps the image's
encoded bytes as stored (never re-encoded unless asked), with its label or, for a set
of COCO-style objects, the fields a COCO conversion writes (boxes XYXY, labels, ...)."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastload.datasets.hf import HFImageDataset
from fastload.datasets.hf_rows import objects_target, require_datasets
from fastload.decode.opencv import decode_image
from fastload.records.format import Field
from fastload.records.sources import Encoding, pack_item
from fastload.records.targets import TargetError, target_fields

__all__ = ["HFSource", "hf_source", "load_saved"]

#: The label column :func:`hf_source` reads from a plain ``datasets.Dataset``: the first
#: of these it has (class labels, else COCO-style objects), else none.
LABEL_COLUMNS = ("label", "labels", "objects")


@dataclass
class HFSource:
    """The rows of an :class:`~fastload.datasets.hf.HFImageDataset` (its image and label
    columns) as records."""

    dataset: HFImageDataset
    description: str

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def classes(self) -> list[str] | None:
        return self.dataset.classes or None

    @functools.cached_property
    def layout(self) -> dict[str, str] | None:
        """The target fields and their roles (from row 0); None for labels."""
        if not self.dataset.columns.detection or not len(self):
            return None
        fields = self._read(0)[3]
        return {name: field.role for name, field in (fields or {}).items()}

    @property
    def fields(self) -> list[str] | None:
        return None if self.layout is None else list(self.layout)

    def name(self, position: int) -> str:
        return f"{self.description}[{position}]"

    def _read(self, position: int) -> tuple[bytes, np.ndarray, Any, dict[str, Field] | None]:
        """Row ``position``'s encoded image, its pixels (decoded once: that proves it whole
        and gives the boxes their canvas), its label and its fields."""
        row = self.dataset.raw([position])[0]
        name = self.dataset.source(position, row)
        data = row.encoded(name)
        rgb = decode_image(data, source=name)
        if not self.dataset.columns.detection:
            return data, rgb, row.label, None
        size = (rgb.shape[0], rgb.shape[1])
        target = objects_target(row.label, size, self.dataset.box_format, source=name)
        return data, rgb, None, target_fields(target, what=name, size=size)

    def record(self, position: int, encoding: Encoding) -> bytes:
        data, rgb, label, fields = self._read(position)
        name = self.name(position)
        if fields is not None and {k: f.role for k, f in fields.items()} != self.layout:
            raise TargetError(f"{name}: target fields differ from row 0's {self.layout}")
        if label is not None and not isinstance(label, int):
            raise TargetError(f"{name}: label {label!r} is not a class index")
        return pack_item(rgb, label, fields, encoding, what=name, data=data)


def hf_source(source: Any) -> HFSource | None:
    """The record source of an ``HFImageDataset`` or a ``datasets.Dataset`` (its ``image``
    column, and the first of :data:`LABEL_COLUMNS` it has); None for anything else."""
    if isinstance(source, HFImageDataset):
        return HFSource(source, _describe(source))
    if type(source).__module__.split(".")[0] != "datasets":
        return None
    columns = list(getattr(source, "column_names", None) or [])
    label = next((name for name in LABEL_COLUMNS if name in columns), None)
    dataset = HFImageDataset(source, "image", label, decode=None)
    return HFSource(dataset, _describe(dataset))


def _describe(dataset: HFImageDataset) -> str:
    fingerprint = getattr(dataset.rows, "_fingerprint", None) or "in memory"
    return f"Hugging Face dataset {fingerprint}"


def load_saved(path: str | os.PathLike[str], split: str | None) -> Any:
    """The ``datasets.Dataset`` saved at ``path`` by ``save_to_disk``: a ``Dataset``, or
    ``split`` of a ``DatasetDict`` (which may be left out when it has one split)."""
    datasets = require_datasets()
    try:
        loaded = datasets.load_from_disk(os.fspath(path))
    except IndexError:  # datasets' own, loading a save of no rows
        empty = _empty_saves(Path(path))
        if not empty:
            raise
        raise ValueError(
            f"{', '.join(empty)}: an empty Hugging Face set (saved with no rows): no images, "
            "nothing to convert"
        ) from None
    if not isinstance(loaded, datasets.DatasetDict):
        if split is not None:
            raise ValueError(f"{path}: one Dataset, no splits; leave --hf-split out")
        return loaded
    if split is None and len(loaded) == 1:
        return next(iter(loaded.values()))
    if split not in loaded:
        given = "give" if split is None else f"no split {split!r}; give"
        raise ValueError(f"{path}: {given} one of its splits with --hf-split: {sorted(loaded)}")
    return loaded[split]


def _empty_saves(path: Path) -> list[str]:
    """The Datasets saved under ``path`` (itself, or a DatasetDict's splits) with no data
    files: what ``save_to_disk`` writes for no rows."""
    states = [path / "state.json", *path.glob("*/state.json")]
    saved = [(state, json.loads(state.read_text())) for state in states if state.is_file()]
    return [str(state.parent) for state, content in saved if content.get("_data_files") == []]
