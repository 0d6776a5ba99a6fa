"""The record source a conversion reads: a folder (or a dataset), images with a COCO
annotation file, or images with a folder of class masks; ``write_lmdb`` and
``write_shards`` take the same choice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastload.records.coco import CocoSource
from fastload.records.masks import MaskFolderSource
from fastload.records.sources import Source, as_source

__all__ = ["make_source"]


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
    return as_source(source)
