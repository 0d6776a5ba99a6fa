"""What ``write_lmdb`` reads, and how one item becomes a record: an image folder or a list
of files (kept byte for byte unless re-encoded), or a Dataset of arrays, tensors or PIL
images (stored losslessly as arrays unless re-encoded)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fastload.datasets.decode import ImageDecodeError, decode_image
from fastload.datasets.folder import folder_samples
from fastload.lmdb.format import pack_record

__all__ = ["DatasetSource", "Encoding", "FileSource", "as_source"]


@dataclass(frozen=True)
class Encoding:
    """How records are made: ``resize`` (longest side, never up) and JPEG ``quality``."""

    resize: int | None = None
    quality: int | None = None

    def encode(self, rgb: np.ndarray) -> np.ndarray | bytes:
        height, width = rgb.shape[:2]
        if self.resize is not None and max(height, width) > self.resize:
            scale = self.resize / max(height, width)
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
        if self.quality is None and self.resize is None:
            return rgb
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.ndim == 3 else rgb
        ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.quality or 90])
        if not ok:
            raise ImageDecodeError("OpenCV could not encode the image as JPEG")
        return jpeg.tobytes()


@dataclass
class FileSource:
    """Image files with labels; each record keeps the file's bytes unless presized."""

    samples: list[tuple[str, int]]
    classes: list[str] | None
    description: str

    def __len__(self) -> int:
        return len(self.samples)

    def name(self, position: int) -> str:
        return self.samples[position][0]

    def record(self, position: int, encoding: Encoding) -> bytes:
        path, label = self.samples[position]
        data = Path(path).read_bytes()
        rgb = decode_image(data, source=path)  # also proves the file is a whole image
        if encoding.resize is None and encoding.quality is None:
            return pack_record(data, label)
        return pack_record(encoding.encode(rgb), label)


@dataclass
class DatasetSource:
    """A map-style dataset of (image, label); images become HWC uint8 arrays."""

    dataset: Any
    description: str
    classes: list[str] | None = field(default=None)

    def __len__(self) -> int:
        return len(self.dataset)

    def name(self, position: int) -> str:
        return f"{self.description}[{position}]"

    def record(self, position: int, encoding: Encoding) -> bytes:
        image, label = self.dataset[position]
        rgb = _to_hwc_uint8(image, name=self.name(position))
        if hasattr(label, "tolist"):  # tensors and NumPy scalars/arrays
            label = np.asarray(label.tolist()) if getattr(label, "ndim", 0) else int(label)
        return pack_record(encoding.encode(rgb), label)


def _to_hwc_uint8(image: Any, *, name: str) -> np.ndarray:
    if hasattr(image, "convert") and hasattr(image, "size"):  # a PIL image
        return np.asarray(image.convert("RGB"))
    if hasattr(image, "numpy"):  # a tensor: CHW as in torchvision
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
    return np.ascontiguousarray(array)


def as_source(source: Any) -> FileSource | DatasetSource:
    """An image folder (path), a list of (path, label), or a map-style Dataset."""
    if isinstance(source, (str, os.PathLike)):
        classes, _, samples = folder_samples(source)
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
