"""ImageFolder: torchvision's ImageFolder, read and decoded with OpenCV, returning uint8."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fastload.datasets.base import ImageDataset
from fastload.decode.opencv import DecodeMode

__all__ = ["ImageFolder", "folder_samples"]


def folder_samples(
    root: str | os.PathLike[str],
) -> tuple[list[str], dict[str, int], list[tuple[str, int]]]:
    """``(classes, class_to_idx, samples)`` exactly as torchvision's ImageFolder finds them."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such image folder")
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    if not any(entry.is_dir() for entry in os.scandir(root)):
        images = sum(1 for entry in os.scandir(root) if entry.name.lower().endswith(IMG_EXTENSIONS))
        raise FileNotFoundError(
            f"{root}: no class folders in it ({images} images at its top level); an image "
            "folder holds one folder per class, ROOT/CLASS/IMAGE.jpg (one folder for a "
            "single class)"
        )
    classes, class_to_idx = find_classes(str(root))
    samples = make_dataset(str(root), class_to_idx, extensions=IMG_EXTENSIONS)
    return classes, class_to_idx, [(str(path), int(label)) for path, label in samples]


class ImageFolder(ImageDataset):
    """A drop-in for ``torchvision.datasets.ImageFolder`` that decodes with OpenCV.

    Same ``classes``, ``class_to_idx``, ``samples`` and ``targets`` as torchvision's (it
    uses torchvision's own discovery), but images are uint8, never PIL: HWC RGB arrays
    for albumentations, CHW tensors, or the encoded bytes for GPU decoding.

    Args:
        root: A folder with one sub-folder per class.
        transform: Called on the image.
        target_transform: Called on the label.
        decode: ``"numpy"`` (HWC uint8 RGB), ``"tensor"`` (CHW uint8) or ``None`` (the
            file's bytes as a 1-D uint8 tensor).
        min_size: The smallest image your transform needs: JPEGs at least twice as large
            are decoded at 1/2, 1/4 or 1/8 scale (see
            :func:`fastload.decode.opencv.decode_image`).

    Example:
        >>> import tempfile, fastload
        >>> root = fastload.make_image_folder(tempfile.mkdtemp(), num_classes=2, images_per_class=1)
        >>> image, label = ImageFolder(root, min_size=100)[1]
        >>> image.shape, label
        ((188, 250, 3), 1)
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        decode: DecodeMode = "numpy",
        min_size: int | tuple[int, int] | None = None,
    ) -> None:
        super().__init__(transform, target_transform, decode, min_size)
        self.root = Path(root)
        self.classes, self.class_to_idx, samples = folder_samples(root)
        # NumPy arrays, not a list of (str, int) tuples: reading a Python object writes
        # its reference count, so every forked worker that walks a list copies the pages
        # holding it, and a large dataset grows each worker by its whole sample list.
        self._paths = np.array([os.fsencode(path) for path, _ in samples], dtype=np.bytes_)
        self._labels = np.array([label for _, label in samples], dtype=np.int64)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``(path, class index)`` pairs, as torchvision's ImageFolder has them."""
        pairs = zip(self._paths, self._labels, strict=True)
        return [(os.fsdecode(path), int(label)) for path, label in pairs]

    imgs = samples

    @property
    def targets(self) -> list[int]:
        labels: list[int] = self._labels.tolist()
        return labels

    def __len__(self) -> int:
        return len(self._labels)

    def sample(self, index: int) -> tuple[str, int]:
        """The path and class index of sample ``index``, without reading the file."""
        return os.fsdecode(self._paths[index]), int(self._labels[index])

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, label = self.sample(index)
        return self._finish(self._load(Path(path).read_bytes(), source=path), label, path)

    def __repr__(self) -> str:
        return (
            f"ImageFolder({str(self.root)!r}, images={len(self)}, classes={len(self.classes)}, "
            f"decode={self.decode!r}, min_size={self.min_size})"
        )
