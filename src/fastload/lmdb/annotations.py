"""Detection and segmentation sources for ``write_lmdb``: images with a COCO-style
annotation file (boxes, labels, crowd flags, areas, optionally instance masks), or a
folder of images with a parallel folder of PNG class masks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from fastload.datasets.decode import ImageDecodeError, decode_image
from fastload.lmdb.format import Field
from fastload.lmdb.sources import Encoding, pack_item
from fastload.lmdb.targets import ARRAY, BOXES, MASK

__all__ = ["CocoSource", "MaskFolderSource"]

COCO_FIELDS = ["boxes", "labels", "iscrowd", "area", "image_id"]
_MASK_MODES = {"P", "L", "1", "I;16", "I"}  # palette (VOC), grey, bilevel, 16/32-bit grey


@dataclass
class CocoSource:
    """The images of a COCO-style ``instances_*.json`` under ``root``, in the file's order.

    Each record holds the image file and the fields ``boxes`` (XYXY, from COCO's XYWH),
    ``labels`` (the category ids, as torchvision's COCO references keep them),
    ``iscrowd``, ``area`` and ``image_id``; with ``instance_masks``, also ``masks``
    ((K, H, W) uint8, rasterised by pycocotools from polygons or RLE).
    """

    root: Path
    annotations_path: Path
    instance_masks: bool = False
    images: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    categories: list[dict[str, Any]] = field(default_factory=list)
    classes: ClassVar[None] = None  # categories, not classes: COCO's ids have gaps

    def __post_init__(self) -> None:
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no such image folder")
        if self.instance_masks:
            _pycocotools_mask()  # fail now, not in a worker
        self.images, self.objects, self.categories = _read_coco(self.annotations_path)

    @property
    def description(self) -> str:
        masks = " with instance masks" if self.instance_masks else ""
        return f"{self.root.resolve()} annotated by {self.annotations_path.resolve()}{masks}"

    @property
    def fields(self) -> list[str]:
        return COCO_FIELDS + ["masks"] * self.instance_masks

    def __len__(self) -> int:
        return len(self.images)

    def name(self, position: int) -> str:
        return str(self.root / self.images[position]["file_name"])

    def record(self, position: int, encoding: Encoding) -> bytes:
        image, path = self.images[position], self.name(position)
        data = Path(path).read_bytes()
        rgb = decode_image(data, source=path)
        height, width = rgb.shape[:2]
        if (image.get("height", height), image.get("width", width)) != (height, width):
            raise ImageDecodeError(
                f"{path}: the image is {width}x{height}, {self.annotations_path} says "
                f"{image['width']}x{image['height']}"
            )
        objects = self.objects.get(image["id"], [])
        fields = _box_fields(objects, image["id"])
        if self.instance_masks:
            fields["masks"] = Field(MASK, _instance_masks(objects, height, width, what=path))
        return pack_item(rgb, None, fields, encoding, what=path, data=data)


def _read_coco(
    path: Path,
) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]], list[dict[str, Any]]]:
    """(images, annotations by image id, categories), checked so that a malformed file
    fails here, naming the entry, not half-way through a conversion."""
    try:
        coco = json.loads(Path(path).read_bytes())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from error
    if not isinstance(coco, dict) or not isinstance(coco.get("images"), list):
        raise ValueError(f"{path}: not a COCO annotation file (no 'images' list)")
    images = coco["images"]
    for index, image in enumerate(images):
        name = image.get("file_name") if isinstance(image, dict) else None
        if not isinstance(name, str) or not isinstance(image.get("id"), int):
            raise ValueError(f"{path}: images[{index}] needs an integer 'id' and a 'file_name'")
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
            raise ValueError(
                f"{path}: images[{index}] file_name {name!r} is not a relative path inside "
                "the image folder"
            )
    ids = {image["id"] for image in images}
    if len(ids) != len(images):
        raise ValueError(f"{path}: two images have the same id")
    objects: dict[int, list[dict[str, Any]]] = {}
    for index, annotation in enumerate(coco.get("annotations") or []):
        _check_annotation(annotation, ids, what=f"{path}: annotations[{index}]")
        objects.setdefault(annotation["image_id"], []).append(annotation)
    return images, objects, list(coco.get("categories") or [])


def _check_annotation(annotation: Any, ids: set[int], *, what: str) -> None:
    if not isinstance(annotation, dict):
        raise ValueError(f"{what} is not an object")
    if annotation.get("image_id") not in ids:
        raise ValueError(f"{what}: image_id {annotation.get('image_id')!r} is not in 'images'")
    box = annotation.get("bbox")
    if not (
        isinstance(box, list)
        and len(box) == 4
        and all(isinstance(v, (int, float)) and np.isfinite(v) for v in box)
    ):
        raise ValueError(f"{what}: bbox {box!r} is not four finite numbers [x, y, width, height]")
    category = annotation.get("category_id")
    if not isinstance(category, int) or isinstance(category, bool):
        raise ValueError(f"{what}: category_id {category!r} is not an integer")


def _box_fields(objects: list[dict[str, Any]], image_id: int) -> dict[str, Field]:
    xywh = np.array([obj["bbox"] for obj in objects], np.float32).reshape(-1, 4)
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    return {
        "boxes": Field(BOXES + "XYXY", xyxy),
        "labels": Field(ARRAY, np.array([obj["category_id"] for obj in objects], np.int64)),
        "iscrowd": Field(ARRAY, np.array([obj.get("iscrowd", 0) for obj in objects], np.uint8)),
        "area": Field(ARRAY, np.array([obj.get("area", 0.0) for obj in objects], np.float32)),
        "image_id": Field(ARRAY, np.array(image_id, np.int64)),
    }


def _pycocotools_mask() -> Any:
    try:
        from pycocotools import mask
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "instance masks are rasterised by pycocotools: pip install 'fastload[coco]'"
        ) from error
    return mask


def _instance_masks(objects: list[dict[str, Any]], height: int, width: int, *, what: str):
    """(K, H, W) uint8: each object's polygons or RLE, as COCO's own API rasterises it."""
    coco_mask = _pycocotools_mask()
    masks = np.zeros((len(objects), height, width), np.uint8)
    for index, obj in enumerate(objects):
        segmentation = obj.get("segmentation")
        if not segmentation:
            continue
        try:  # as pycocotools' COCO.annToRLE reads the three forms
            if isinstance(segmentation, list):  # polygons
                rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
            elif isinstance(segmentation.get("counts"), list):  # uncompressed RLE
                rle = coco_mask.frPyObjects(segmentation, height, width)
            else:  # compressed RLE
                rle = segmentation
            masks[index] = coco_mask.decode(rle)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            raise ImageDecodeError(
                f"{what}: annotation {obj.get('id', index)} has a segmentation pycocotools "
                f"cannot read ({error})"
            ) from error
    return masks


@dataclass
class MaskFolderSource:
    """Every image under ``root`` (sorted, sub-folders included) with its class mask:
    ``masks/<same relative path>.png``, one class index per pixel (palette PNGs as in
    Pascal VOC give their indices, not colours). Each record holds the image file and
    the field ``mask`` ((H, W) uint8 or uint16).
    """

    root: Path
    masks: Path
    fields: ClassVar[list[str]] = ["mask"]
    classes: ClassVar[None] = None

    def __post_init__(self) -> None:
        from torchvision.datasets.folder import IMG_EXTENSIONS

        for folder, what in ((self.root, "image"), (self.masks, "mask")):
            if not folder.is_dir():
                raise FileNotFoundError(f"{folder}: no such {what} folder")
        self.images = sorted(
            os.path.relpath(path, self.root)
            for path in self.root.rglob("*")
            if path.suffix.lower() in IMG_EXTENSIONS and path.is_file()
        )

    @property
    def description(self) -> str:
        return f"{self.root.resolve()} with masks {self.masks.resolve()}"

    def __len__(self) -> int:
        return len(self.images)

    def name(self, position: int) -> str:
        return str(self.root / self.images[position])

    def record(self, position: int, encoding: Encoding) -> bytes:
        path = self.name(position)
        mask_path = (self.masks / self.images[position]).with_suffix(".png")
        data = Path(path).read_bytes()
        rgb = decode_image(data, source=path)
        if not mask_path.is_file():
            raise FileNotFoundError(f"{mask_path}: no mask for {path}")
        mask = _read_mask(mask_path)
        if mask.shape != rgb.shape[:2]:
            raise ImageDecodeError(
                f"{mask_path}: the mask is {mask.shape[1]}x{mask.shape[0]}, its image {path} "
                f"is {rgb.shape[1]}x{rgb.shape[0]}"
            )
        return pack_item(rgb, None, {"mask": Field(MASK, mask)}, encoding, what=path, data=data)


def _read_mask(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as image:
            if image.mode not in _MASK_MODES:
                raise ImageDecodeError(
                    f"{path}: a {image.mode} image; masks hold one class index per pixel "
                    "(grey, palette or 16-bit PNG)"
                )
            mask = np.asarray(image)
    except (OSError, SyntaxError) as error:  # PIL's errors for corrupt files
        raise ImageDecodeError(f"{path}: not a readable PNG mask ({error})") from error
    if mask.dtype == np.bool_:
        return mask.astype(np.uint8)
    if mask.dtype.kind == "i":  # PIL's 32-bit grey
        if mask.min(initial=0) < 0 or mask.max(initial=0) > np.iinfo(np.uint16).max:
            raise ImageDecodeError(f"{path}: class indices outside 0..65535")
        return mask.astype(np.uint16)
    return mask
