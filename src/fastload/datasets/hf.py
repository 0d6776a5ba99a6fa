"""HFImageDataset: a Hugging Face ``datasets`` image set read bytes first, a batch of rows
in one Arrow read, decoded by fastload's OpenCV path (or on the GPU), never by PIL."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastload.datasets.base import ImageDataset
from fastload.datasets.hf_rows import (
    HFColumns,
    RawRow,
    check_box_format,
    objects_target,
    read_rows,
    require_datasets,
)
from fastload.decode.opencv import DecodeMode, decoded_size
from fastload.seeds import seeded_rows

__all__ = ["HFImageDataset", "from_hf"]


class HFImageDataset(ImageDataset):
    """A map-style ``datasets.Dataset`` of images as fastload's datasets give them.

    The image column is read as the encoded bytes Arrow stores (the user's set is not
    changed: a copy of it is cast to ``Image(decode=False)``), then decoded by
    :func:`fastload.decode.opencv.load_image`: reduced-size JPEG decode with
    ``min_size``, the pixel limit, HWC uint8 ``"numpy"`` or CHW ``"tensor"``, or with
    ``decode=None`` the bytes as a 1-D uint8 tensor for
    :class:`fastload.transforms.DecodeRandomResizedCrop` or ``GPUDecoder``. Rows stored
    as a path only (an ``imagefolder`` set) are read from the file.

    ``__getitems__`` (what DataLoader and FastLoader fetch a batch through) reads the
    batch's rows in one Arrow ``take``. Under ``FastLoader(seed=...)`` each row is decoded
    and transformed with the generators seeded from its own key, so its draws are those
    ``dataset[i]`` gets, whatever the batch.

    Args:
        dataset: A map-style ``datasets.Dataset`` (one split).
        image: The ``Image`` column.
        label: The label column (its value handed on, a ``ClassLabel`` as an int), a
            COCO-style objects column (per-object ``bbox`` and ``category``, as the Hub's
            detection sets have) given as a target dict, or None for images alone.
        transform: Called on the image.
        target_transform: Called on the label or target.
        transforms: Called on ``(image, target)`` together; not with ``transform`` or
            ``target_transform``.
        decode: ``"numpy"``, ``"tensor"`` or None (see :data:`fastload.decode.opencv.DecodeMode`).
        min_size: The smallest image the transform needs: JPEGs at least twice as large
            are decoded at 1/2, 1/4 or 1/8 scale. Not with detection targets.
        box_format: The objects' ``bbox`` format: ``"XYWH"`` (COCO's, the Hub's usual),
            ``"XYXY"`` or ``"CXCYWH"``; targets always hold XYXY boxes.

    Example:
        >>> import tempfile, fastload
        >>> from datasets import load_dataset
        >>> folder = fastload.make_image_folder(
        ...     tempfile.mkdtemp(), num_classes=2, images_per_class=1
        ... )
        >>> hf = load_dataset("imagefolder", data_dir=str(folder), split="train")
        >>> dataset = HFImageDataset(hf, min_size=100)
        >>> image, label = dataset[1]
        >>> image.shape, label, dataset.classes
        ((188, 250, 3), 1, ['class_00', 'class_01'])
    """

    def __init__(
        self,
        dataset: Any,
        image: str = "image",
        label: str | None = "label",
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        decode: DecodeMode = "numpy",
        min_size: int | tuple[int, int] | None = None,
        transforms: Callable[[Any, Any], tuple[Any, Any]] | None = None,
        box_format: str = "XYWH",
    ) -> None:
        super().__init__(transform, target_transform, decode, min_size, transforms)
        self.columns = HFColumns.of(dataset, image, label)
        self.box_format = check_box_format(box_format)
        if min_size is not None and self.columns.detection:
            raise ValueError(
                f"min_size decodes images smaller, the boxes of {label!r} are at full scale; "
                "leave min_size out"
            )
        datasets = require_datasets()
        raw = dataset.select_columns(self.columns.names)
        if raw.features[image].decode:  # a new Dataset: the user's keeps decoding
            raw = raw.cast_column(image, datasets.Image(decode=False))
        self.rows = raw.with_format("arrow")

    @property
    def classes(self) -> list[str]:
        """The ``ClassLabel`` names of the label (or of the objects' categories)."""
        return list(self.columns.classes or [])

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.rows)

    def raw(self, indices: Sequence[int]) -> list[RawRow]:
        """Rows ``indices`` as stored (encoded image or path, label), in one Arrow read."""
        count = len(self.rows)
        for index in indices:
            if not -count <= index < count:
                raise IndexError(f"index {index} is out of range for {count} rows")
        return read_rows(self.rows, self.columns, [int(index) % count for index in indices])

    def source(self, index: int, row: RawRow) -> str:
        """How errors name row ``index``: ``row 7`` or ``row 7 (/data/cat.jpg)``."""
        return f"row {index}" + (f" ({row.path})" if row.path else "")

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self._sample(index, self.raw([index])[0])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """A batch: one Arrow read, then each row decoded and transformed. Under a seeded
        FastLoader, row ``i`` runs with the generators seeded from its own key."""
        rows = self.raw(indices)
        return [self._sample(int(indices[i]), rows[i]) for i in seeded_rows(len(rows))]

    def _sample(self, index: int, row: RawRow) -> tuple[Any, Any]:
        source = self.source(index, row)
        image = self._load(row.encoded(source), source=source)
        target = row.label
        if self.columns.detection:
            size = decoded_size(image, source)
            target = objects_target(target, size, self.box_format, source=source)
        return self._finish(image, target, source)

    def __repr__(self) -> str:
        return (
            f"HFImageDataset(rows={len(self)}, image={self.columns.image!r}, "
            f"label={self.columns.label!r}, decode={self.decode!r}, min_size={self.min_size})"
        )


def from_hf(
    dataset: Any,
    image: str = "image",
    label: str | None = "label",
    transform: Callable[[Any], Any] | None = None,
    target_transform: Callable[[Any], Any] | None = None,
    *,
    decode: DecodeMode = "numpy",
    min_size: int | tuple[int, int] | None = None,
    transforms: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    box_format: str = "XYWH",
) -> HFImageDataset:
    """A Hugging Face ``datasets.Dataset`` of images as a fastload dataset: see
    :class:`HFImageDataset` for the arguments.

    Example:
        >>> import tempfile, fastload
        >>> from datasets import load_dataset
        >>> from fastload.transforms import DecodeRandomResizedCrop
        >>> folder = fastload.make_image_folder(
        ...     tempfile.mkdtemp(), num_classes=2, images_per_class=2
        ... )
        >>> hf = load_dataset("imagefolder", data_dir=str(folder), split="train")
        >>> crop = DecodeRandomResizedCrop(224)
        >>> dataset = from_hf(hf, transform=crop, decode=None)
        >>> image, label = dataset[3]
        >>> image.shape, image.dtype, label
        (torch.Size([3, 224, 224]), torch.uint8, 1)
    """
    return HFImageDataset(
        dataset, image, label, transform, target_transform, decode=decode,
        min_size=min_size, transforms=transforms, box_format=box_format,
    )  # fmt: skip
