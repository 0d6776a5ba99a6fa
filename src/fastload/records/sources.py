"""What ``write_lmdb`` reads, and how one item becomes a record: an image folder or a list
of files (kept byte for byte unless re-encoded), or a Dataset of arrays, tensors or PIL
images (stored losslessly as arrays unless re-encoded) with a label or a target dict.
COCO annotations and mask folders: :mod:`fastload.records.coco`."""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from fastload.datasets.folder import folder_samples
from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.records.format import Field, pack_record
from fastload.records.targets import TargetError, resize_fields, target_fields

__all__ = [
    "DatasetSource",
    "Encoding",
    "FileSource",
    "Source",
    "as_source",
    "existing_folder",
    "read_file",
]


def existing_folder(path: Path, what: str) -> Path:
    """``path`` if it is a folder; a FileNotFoundError or NotADirectoryError naming it."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such {what} folder")
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a folder; give the {what} folder")
    return path


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``. A pipe would block the conversion forever
    and a device (``/dev/zero``) never end: both are refused (ImageDecodeError), unread."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, socket or device"
        raise ImageDecodeError(f"{path}: {kind}, not a file")
    return Path(path).read_bytes()


class Source(Protocol):
    """What ``write_lmdb`` converts: items by position, each made into one record."""

    @property
    def description(self) -> str: ...

    @property
    def classes(self) -> list[str] | None: ...

    @property
    def fields(self) -> list[str] | None:
        """The names of each record's fields (a version 2 database), or None (labels)."""

    def __len__(self) -> int: ...

    def name(self, position: int) -> str: ...

    def record(self, position: int, encoding: Encoding) -> bytes: ...


@dataclass(frozen=True)
class Encoding:
    """How records are made: ``resize`` (longest side, never up) and JPEG ``quality``."""

    resize: int | None = None
    quality: int | None = None

    @property
    def keeps_files(self) -> bool:
        return self.resize is None and self.quality is None

    def presized_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """(height, width) after the presize: longest side to ``resize``, never up."""
        height, width = size
        if self.resize is None or max(height, width) <= self.resize:
            return size
        scale = self.resize / max(height, width)
        return max(1, round(height * scale)), max(1, round(width * scale))

    def encode(self, rgb: np.ndarray) -> np.ndarray | bytes:
        """``rgb`` presized and JPEG-encoded, or as it is when neither is asked for."""
        if self.keeps_files:
            return rgb
        height, width = self.presized_size(rgb.shape[:2])
        if (height, width) != rgb.shape[:2]:
            rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.ndim == 3 else rgb
        ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.quality or 90])
        if not ok:
            raise ImageDecodeError("OpenCV could not encode the image as JPEG")
        return jpeg.tobytes()


def pack_item(
    rgb: np.ndarray,
    label: Any,
    fields: dict[str, Field] | None,
    encoding: Encoding,
    *,
    what: str,
    data: bytes | None = None,
) -> bytes:
    """The record of one image (``data``: its file, kept unless ``encoding`` re-encodes),
    with its label or fields; a presize scales the fields with the image."""
    if encoding.keeps_files:
        return pack_record(rgb if data is None else data, label, fields)
    if rgb.ndim == 3 and rgb.shape[2] != 3:
        raise ImageDecodeError(
            f"{what}: a {rgb.shape[2]}-channel image cannot be presized or re-encoded as JPEG; "
            "convert it without resize and quality to store it as it is"
        )
    if fields is not None:
        size = encoding.presized_size(rgb.shape[:2])
        fields = resize_fields(fields, rgb.shape[:2], size, what=what)
    return pack_record(encoding.encode(rgb), label, fields)


@dataclass
class FileSource:
    """Image files with labels (None: none); each record keeps the file's bytes unless
    presized."""

    samples: Sequence[tuple[str, int | None]]
    classes: list[str] | None
    description: str

    def __len__(self) -> int:
        return len(self.samples)

    fields = None  # labels, no target fields

    def name(self, position: int) -> str:
        return self.samples[position][0]

    def record(self, position: int, encoding: Encoding) -> bytes:
        path, label = self.samples[position]
        data = read_file(path)
        rgb = decode_image(data, source=path)  # also proves the file is a whole image
        return pack_item(rgb, label, None, encoding, what=path, data=data)


@dataclass
class DatasetSource:
    """A map-style dataset of (image, label) or (image, target dict); images become HWC
    uint8 arrays. Every item must give what item 0 gives: a label, or a target with the
    same fields and roles (the database's ``fields``)."""

    dataset: Any
    description: str
    classes: list[str] | None = field(default=None)

    def __len__(self) -> int:
        return len(self.dataset)

    def name(self, position: int) -> str:
        return f"{self.description}[{position}]"

    @functools.cached_property
    def layout(self) -> dict[str, str] | None:
        """Item 0's target fields and their roles; None for a dataset of labels."""
        if not len(self.dataset):
            return None
        target = self.dataset[0][1]
        if not isinstance(target, Mapping):
            return None
        return {
            name: field.role for name, field in target_fields(target, what=self.name(0)).items()
        }

    @property
    def fields(self) -> list[str] | None:
        """The target's keys when the dataset gives target dicts (read from item 0)."""
        return None if self.layout is None else list(self.layout)

    def record(self, position: int, encoding: Encoding) -> bytes:
        name = self.name(position)
        image, label = self.dataset[position]
        rgb = _to_hwc_uint8(image, name=name)
        if isinstance(label, Mapping) != (self.layout is not None):
            kinds = ("a label", "a target dict")
            raise TargetError(
                f"{name}: gives {kinds[isinstance(label, Mapping)]}, item 0 "
                f"{kinds[self.layout is not None]}; every item of a database holds the same"
            )
        if isinstance(label, Mapping):
            fields = target_fields(label, what=name, size=rgb.shape[:2])
            layout = {key: value.role for key, value in fields.items()}
            if layout != self.layout:
                raise TargetError(
                    f"{name}: target fields {layout} differ from item 0's {self.layout}; every "
                    "record of a database has the same fields"
                )
            return _packed(rgb, None, fields, encoding, what=name)
        if hasattr(label, "tolist"):  # tensors and NumPy scalars/arrays
            label = np.asarray(label.tolist()) if getattr(label, "ndim", 0) else label.item()
        if isinstance(label, int) and not -(1 << 63) <= label < 1 << 63:
            raise TargetError(f"{name}: label {label} does not fit in 64 bits")
        return _packed(rgb, label, None, encoding, what=name)


def _packed(
    rgb: np.ndarray, label: Any, fields: dict[str, Field] | None, encoding: Encoding, *, what: str
) -> bytes:
    """:func:`pack_item`, a value that cannot be stored named as a TargetError."""
    try:
        return pack_item(rgb, label, fields, encoding, what=what)
    except (TypeError, ValueError, OverflowError) as error:
        if isinstance(error, (TargetError, ImageDecodeError)):
            raise
        raise TargetError(f"{what}: {error}") from error


def _to_hwc_uint8(image: Any, *, name: str) -> np.ndarray:
    if hasattr(image, "convert") and hasattr(image, "size"):  # a PIL image
        array = np.asarray(image.convert("RGB"))
    elif hasattr(image, "numpy"):  # a tensor: CHW as in torchvision
        array = image.detach().cpu().numpy()
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[2] not in (1, 3):
            array = array.transpose(1, 2, 0)
    elif isinstance(image, np.ndarray):
        array = image
    else:
        raise TypeError(
            f"{name}: expected an ndarray, tensor or PIL image, got {type(image).__name__}"
        )
    if array.dtype != np.uint8:
        raise TypeError(f"{name}: images must be uint8, got {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ImageDecodeError(
            f"{name}: an image of shape {array.shape}; images are (H, W) grey or (H, W, 3) "
            "RGB, (H, W, 4) RGBA"
        )
    if not array.shape[0] or not array.shape[1]:
        raise ImageDecodeError(f"{name}: an empty image, {array.shape[1]}x{array.shape[0]}")
    return np.ascontiguousarray(array)


def as_source(source: Any) -> FileSource | DatasetSource:
    """An image folder (path), a list of (path, label), or a map-style Dataset."""
    if isinstance(source, (str, os.PathLike)):
        classes, _, samples = folder_samples(existing_folder(Path(source), "image"))
        return FileSource(samples, classes, str(Path(source).resolve()))
    if (
        isinstance(source, Sequence)
        and all(isinstance(item, (tuple, list)) and len(item) == 2 for item in source)
        and (not source or isinstance(source[0][0], (str, os.PathLike)))
    ):
        samples = [(str(path), int(label)) for path, label in source]
        return FileSource(samples, None, f"list of {len(samples)} files")
    if hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        found = getattr(source, "classes", None)
        return DatasetSource(source, type(source).__name__, list(found) if found else None)
    raise TypeError(
        "source must be an image folder, a list of (path, label) or a map-style Dataset, "
        f"got {type(source).__name__}"
    )
