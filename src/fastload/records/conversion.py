"""What a conversion reads and how: the options both writers take (``write_lmdb`` and
``write_shards``), read and checked once, and the record source they choose: a folder
(or a dataset), images with a COCO annotation file, images with a folder of class
masks, or a Hugging Face image set."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from fastload._checks import check_int
from fastload.records.coco import CocoSource
from fastload.records.hf import hf_source
from fastload.records.masks import MaskFolderSource
from fastload.records.sources import Encoding, Source, as_source

__all__ = ["Conversion", "SourceOptions", "make_source", "require_samples"]


class SourceOptions(TypedDict, total=False):
    """The keyword options of both :func:`fastload.write_lmdb` and
    :func:`fastload.shards.write_shards`.

    Attributes:
        resume: Continue an interrupted conversion of the same source into the same
            destination. Without it an existing destination is refused, never
            overwritten.
        skip_bad: Skip unreadable, corrupt, truncated or non-image files (listed in the
            metadata) instead of stopping at the first one.
        resize: Presize: longest side to this many pixels (never enlarged), re-encoded
            as JPEG at ``quality`` (90 if not given).
        quality: JPEG quality for images fastload encodes. Files are kept byte for byte
            unless ``resize`` or ``quality`` is given; Dataset images are stored as raw
            arrays (lossless) unless one is.
        annotations: A COCO-style annotation file (``instances_train2017.json``) for the
            images under the folder ``source``: records get the fields ``boxes`` (XYXY),
            ``labels``, ``iscrowd``, ``area`` and ``image_id``.
        instance_masks: With ``annotations``: also ``masks``, each object's polygons or
            RLE rasterised as (K, H, W) uint8 (needs pycocotools:
            ``pip install '.[coco]'``).
        masks: A folder of PNG class masks for the images under the folder ``source``
            (same relative paths, ``.png``): records get the field ``mask``.
    """

    resume: bool
    skip_bad: bool
    resize: int | None
    quality: int | None
    annotations: str | os.PathLike[str] | None
    instance_masks: bool
    masks: str | os.PathLike[str] | None


@dataclass(frozen=True)
class Conversion:
    """:class:`SourceOptions` as given to a writer, with their defaults, checked.

    Example:
        >>> Conversion.of({"resize": 256}, "write_lmdb").encoding
        Encoding(resize=256, quality=None)
        >>> Conversion.of({"resise": 256}, "write_lmdb")
        Traceback (most recent call last):
        TypeError: write_lmdb() got an unexpected keyword argument 'resise'
    """

    resume: bool = False
    skip_bad: bool = False
    resize: int | None = None
    quality: int | None = None
    annotations: str | os.PathLike[str] | None = None
    instance_masks: bool = False
    masks: str | os.PathLike[str] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any], writer: str) -> Conversion:
        """The options a call of ``writer`` got; a name that is not an option raises the
        ``TypeError`` Python raises for a keyword a function does not take."""
        for name in options:
            if name not in SourceOptions.__optional_keys__:
                raise TypeError(f"{writer}() got an unexpected keyword argument {name!r}")
        conversion = cls(**options)
        if conversion.quality is not None:
            check_int(conversion.quality, "quality", low=1, high=100)
        if conversion.resize is not None:
            check_int(conversion.resize, "resize", low=1)
        return conversion

    @property
    def encoding(self) -> Encoding:
        return Encoding(self.resize, self.quality)

    def source(self, source: Any) -> Source:
        """The record source of ``source`` under these options."""
        return make_source(source, self.annotations, self.instance_masks, self.masks)


def make_source(
    source: Any,
    annotations: str | os.PathLike[str] | None,
    instance_masks: bool,
    masks: str | os.PathLike[str] | None,
) -> Source:
    if annotations is not None and masks is not None:
        raise ValueError("give annotations (detection) or masks (segmentation), not both")
    if instance_masks and annotations is None:
        raise ValueError("instance_masks come from annotations: give the annotation file")
    if (annotations or masks) is not None and not isinstance(source, (str, os.PathLike)):
        raise TypeError("with annotations or masks, source must be the image folder")
    if annotations is not None:
        return CocoSource(Path(source), Path(annotations), instance_masks)
    if masks is not None:
        return MaskFolderSource(Path(source), Path(masks))
    hf = hf_source(source)
    return hf if hf is not None else as_source(source)


def require_samples(items: Source) -> Source:
    """``items``, refused when empty: a conversion of nothing is a mistake of the source
    (an empty folder or set), said naming it, not an empty database or shard set."""
    if not len(items):
        raise ValueError(f"{items.description}: no images, nothing to convert")
    return items
