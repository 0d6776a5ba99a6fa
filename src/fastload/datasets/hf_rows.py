"""Rows of a Hugging Face ``datasets.Dataset`` read as fastload reads its own stores: the
image column's encoded bytes (never a PIL image), a batch of rows in one Arrow read, and
the label column as a class index or a COCO-style ``objects`` target.

Only :func:`require_datasets` imports ``datasets``; the rest reads the set's ``features``
and the Arrow tables it returns, so ``import fastload.datasets`` works without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "HFColumns",
    "RawRow",
    "check_box_format",
    "objects_target",
    "read_rows",
    "require_datasets",
]

#: The per-object lists of a COCO-style ``objects`` column and the target fields they
#: become (the names :mod:`fastload.records.coco` writes and LMDBDataset returns).
_OBJECT_FIELDS = {"category": "labels", "area": "area", "iscrowd": "iscrowd"}
_BOX_FORMATS = ("XYWH", "XYXY", "CXCYWH")


def require_datasets() -> Any:
    """The ``datasets`` module, or a ModuleNotFoundError with the command that installs it."""
    try:
        import datasets
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "reading Hugging Face datasets needs the datasets package: pip install '.[datasets]'"
        ) from error
    return datasets


@dataclass(frozen=True)
class RawRow:
    """One row as read: the image's encoded bytes (None: read ``path``), its ``path`` (or
    None) and the label column's value (None without one)."""

    data: bytes | None
    path: str | None
    label: Any

    def encoded(self, source: str) -> bytes:
        """The encoded image: the stored bytes, else the file at ``path``."""
        if self.data is not None:
            return self.data
        if self.path is None:
            raise ValueError(f"{source}: the image column holds neither bytes nor a path")
        try:
            return Path(self.path).read_bytes()
        except OSError as error:
            error.add_note(f"reading the image of {source}")
            raise


@dataclass(frozen=True)
class HFColumns:
    """Which columns hold the image and the label, checked against a set's features.

    ``detection``: the label column is COCO-style objects (per-object ``bbox`` and
    ``category`` lists), given as a target dict; otherwise its value is handed on.
    """

    image: str
    label: str | None
    detection: bool
    classes: list[str] | None
    image_id: str | None  # a column of image ids, kept in a detection target

    @classmethod
    def of(cls, dataset: Any, image: str, label: str | None) -> HFColumns:
        """The columns of ``dataset`` (a map-style ``datasets.Dataset``), checked.

        Raises:
            TypeError: Not a map-style ``datasets.Dataset``.
            ValueError: A column that is missing, or an image column that is not an
                ``Image`` feature; the message lists the columns there are.
        """
        datasets = require_datasets()
        if isinstance(dataset, datasets.IterableDataset):
            raise TypeError(
                "an IterableDataset (streaming=True) has no random access; load the set "
                "without streaming for a map-style datasets.Dataset"
            )
        if isinstance(dataset, datasets.DatasetDict):
            raise TypeError(
                f"a DatasetDict of splits {sorted(dataset)}; pick one, such as dataset['train']"
            )
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"expected a datasets.Dataset, got {type(dataset).__name__}")
        features = dataset.features
        there = ", ".join(repr(name) for name in features)
        for role, name in (("image", image), ("label", label)):
            if name is not None and name not in features:
                raise ValueError(
                    f"{role} column {name!r} is not in the dataset; its columns: {there}"
                    + ("; label=None reads images alone" if role == "label" else "")
                )
        if not isinstance(features[image], datasets.Image):
            raise ValueError(
                f"image column {image!r} is a {type(features[image]).__name__}, not an Image "
                f"feature; its columns: {there}"
            )
        feature = features[label] if label is not None else None
        detection = _is_objects(feature)
        if detection:  # the objects' categories name the classes
            feature = getattr(feature, "feature", feature)["category"]  # type: ignore[index]
        names = _class_names(feature)
        image_id = "image_id" if detection and "image_id" in features else None
        return cls(image, label, detection, names, image_id)

    @property
    def names(self) -> list[str]:
        """The columns a read takes."""
        return [n for n in (self.image, self.label, self.image_id) if n is not None]


def _is_objects(feature: Any) -> bool:
    """Whether ``feature`` is COCO-style objects: per-object ``bbox`` and ``category``,
    stored as a dict of lists (``Sequence({...})``) or a list of dicts (``List({...})``)."""
    inner = getattr(feature, "feature", feature)  # the element of a List / Sequence
    return isinstance(inner, Mapping) and "bbox" in inner and "category" in inner


def _class_names(feature: Any) -> list[str] | None:
    inner = getattr(feature, "feature", feature)
    names = getattr(inner, "names", None)
    return list(names) if names else None


def read_rows(rows: Any, columns: HFColumns, indices: Sequence[int]) -> list[RawRow]:
    """Rows ``indices`` of ``rows`` (the set formatted as Arrow) in one read: a single
    ``take`` over the Arrow table, whatever the batch size."""
    table = rows[list(indices)]
    images = table.column(columns.image).combine_chunks()
    data = images.field("bytes").to_pylist()
    paths = images.field("path").to_pylist()
    labels = (
        table.column(columns.label).to_pylist() if columns.label is not None else [None] * len(data)
    )
    if columns.image_id is not None:  # detection: the image id travels with the objects
        ids = table.column(columns.image_id).to_pylist()
        labels = [(objects, image_id) for objects, image_id in zip(labels, ids, strict=True)]
    return [RawRow(*row) for row in zip(data, paths, labels, strict=True)]


def objects_target(
    value: Any, canvas_size: tuple[int, int], box_format: str, *, source: str
) -> dict[str, Any]:
    """The detection target of one row's objects, as LMDBDataset gives a COCO record's:
    ``boxes`` (``BoundingBoxes``, XYXY, on the image's canvas), ``labels`` (int64), and
    ``area`` (float32), ``iscrowd`` (uint8), ``image_id`` where the set has them.

    Example:
        >>> target = objects_target(
        ...     {"bbox": [[10, 20, 30, 40]], "category": [3]}, (100, 200), "XYWH", source="doc"
        ... )
        >>> target["boxes"].tolist(), target["labels"].tolist()
        ([[10.0, 20.0, 40.0, 60.0]], [3])
    """
    from torchvision import tv_tensors  # here: importing torchvision loads its models

    image_id = None
    if isinstance(value, tuple):
        value, image_id = value
    objects = _dict_of_lists(value, source)
    boxes = np.asarray(objects["bbox"], np.float32).reshape(-1, 4)
    if box_format == "XYWH":
        boxes = np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], axis=1)
    elif box_format == "CXCYWH":
        half = boxes[:, 2:] / 2
        boxes = np.concatenate([boxes[:, :2] - half, boxes[:, :2] + half], axis=1)
    target: dict[str, Any] = {
        "boxes": tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format="XYXY", canvas_size=canvas_size
        )
    }
    dtypes = {"labels": np.int64, "area": np.float32, "iscrowd": np.uint8}
    for column, name in _OBJECT_FIELDS.items():
        if column in objects:
            array = np.asarray(objects[column], dtypes[name])
            if len(array) != len(boxes):
                raise ValueError(
                    f"{source}: {len(boxes)} boxes but {len(array)} values of {column!r}"
                )
            target[name] = torch.from_numpy(array)
    if image_id is not None:
        target["image_id"] = torch.tensor(image_id, dtype=torch.int64)
    return target


def _dict_of_lists(value: Any, source: str) -> dict[str, list[Any]]:
    """A ``Sequence({...})`` column reads as a dict of lists, a ``List({...})`` one as a
    list of dicts: both become the former."""
    if isinstance(value, Mapping):
        return {key: list(items) for key, items in value.items()}
    if isinstance(value, list):
        keys = {key for item in value for key in item}
        return {key: [item.get(key) for item in value] for key in keys} | (
            {} if value else {"bbox": [], "category": []}
        )
    raise ValueError(f"{source}: objects of type {type(value).__name__}, not a dict or a list")


def check_box_format(box_format: str) -> str:
    if box_format not in _BOX_FORMATS:
        raise ValueError(f"box_format must be one of {_BOX_FORMATS}, got {box_format!r}")
    return box_format
