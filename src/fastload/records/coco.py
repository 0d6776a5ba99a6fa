"""Images with a COCO-style annotation file as a record source (boxes, labels, crowd flags,
areas, optionally instance masks), every object checked against its image."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np

from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.records.format import Field
from fastload.records.sources import Encoding, existing_folder, pack_item, read_file
from fastload.records.targets import ARRAY, BOXES, MASK, OUTSIDE, TargetError

__all__ = ["COCO_FIELDS", "CocoSource"]

COCO_FIELDS = ["boxes", "labels", "iscrowd", "area", "image_id"]


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
    objects: dict[int, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    categories: list[dict[str, Any]] = field(default_factory=list)
    classes: ClassVar[None] = None  # categories, not classes: COCO's ids have gaps

    def __post_init__(self) -> None:
        existing_folder(self.root, "image")
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
        data = read_file(path)
        rgb = decode_image(data, source=path)
        height, width = rgb.shape[:2]
        if (image.get("height", height), image.get("width", width)) != (height, width):
            raise ImageDecodeError(
                f"{path}: the image is {width}x{height}, {self.annotations_path} says "
                f"{image.get('width')}x{image.get('height')}"
            )
        objects = self.objects.get(image["id"], [])
        whats = [_object_what(self.annotations_path, index, obj, path) for index, obj in objects]
        for what, (_, obj) in zip(whats, objects, strict=True):
            _check_object(obj, height, width, self.instance_masks, what=what)
        fields = _box_fields([obj for _, obj in objects], image["id"])
        if self.instance_masks:
            masks = _instance_masks(objects, height, width, what=path, whats=whats)
            fields["masks"] = Field(MASK, masks)
        return pack_item(rgb, None, fields, encoding, what=path, data=data)


def _object_what(annotations: Path, index: int, obj: dict[str, Any], image: str) -> str:
    """How errors name an annotation: the JSON file, its index and id, and its image."""
    return f"{annotations}: annotations[{index}] (id {obj.get('id')!r}) of {image}"


def _read_coco(
    path: Path,
) -> tuple[list[dict[str, Any]], dict[int, list[tuple[int, dict[str, Any]]]], list[dict[str, Any]]]:
    """(images, (index, annotation) pairs by image id, categories), the file's structure
    checked so that a malformed file fails here, naming the entry. Each annotation's
    values are checked with its image (:func:`_check_object`): a bad one is skippable."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such annotation file")
    try:
        coco = json.loads(read_file(path))
    except ImageDecodeError as error:  # a folder, a pipe
        raise ValueError(f"{error}; give the COCO annotation file (JSON)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from error
    if not isinstance(coco, dict) or not isinstance(coco.get("images"), list):
        raise ValueError(f"{path}: not a COCO annotation file (no 'images' list)")
    images = coco["images"]
    for index, image in enumerate(images):
        name = image.get("file_name") if isinstance(image, dict) else None
        if not isinstance(name, str) or not _is_int64(image.get("id")):
            raise ValueError(f"{path}: images[{index}] needs an integer 'id' and a 'file_name'")
        parts = PurePosixPath(name).parts
        if (
            not parts
            or PurePosixPath(name).is_absolute()
            or ".." in parts
            or "\\" in name
            or "\0" in name
        ):
            raise ValueError(
                f"{path}: images[{index}] file_name {name!r} is not a relative path inside "
                "the image folder"
            )
    ids = {image["id"] for image in images}
    if len(ids) != len(images):
        raise ValueError(f"{path}: two images have the same id")
    annotations = coco.get("annotations") or []
    if not isinstance(annotations, list):
        raise ValueError(f"{path}: 'annotations' is not a list")
    objects: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for index, annotation in enumerate(annotations):
        if not isinstance(annotation, dict):
            raise ValueError(f"{path}: annotations[{index}] is not an object")
        image_id = annotation.get("image_id")
        if not isinstance(image_id, int) or isinstance(image_id, bool) or image_id not in ids:
            raise ValueError(
                f"{path}: annotations[{index}]: image_id {image_id!r} is not in 'images'"
            )
        objects.setdefault(image_id, []).append((index, annotation))
    categories = coco.get("categories") or []
    if not isinstance(categories, list):
        raise ValueError(f"{path}: 'categories' is not a list")
    return images, objects, categories


_INT64 = np.iinfo(np.int64)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _is_int64(value: Any) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64.min <= value <= _INT64.max
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _inside(xs: Sequence[float], ys: Sequence[float], height: int, width: int) -> bool:
    return (
        min(xs) >= -OUTSIDE
        and min(ys) >= -OUTSIDE
        and max(xs) <= width + OUTSIDE
        and max(ys) <= height + OUTSIDE
    )


def _check_object(obj: dict[str, Any], height: int, width: int, masks: bool, *, what: str) -> None:
    """Refuse (TargetError, naming ``what``) an annotation that would be stored wrong, be
    unreadable, or crash pycocotools: every value is checked against its image."""
    box = obj.get("bbox")
    if not (isinstance(box, list) and len(box) == 4 and all(map(_is_number, box))):
        raise TargetError(f"{what}: bbox {box!r} is not four finite numbers [x, y, width, height]")
    x, y, box_width, box_height = box
    if box_width < 0 or box_height < 0:
        raise TargetError(f"{what}: bbox {box!r} has a negative width or height")
    if not _inside((x, x + box_width), (y, y + box_height), height, width):
        raise TargetError(f"{what}: bbox {box!r} is outside the {width}x{height} image")
    category = obj.get("category_id")
    if not _is_int64(category):
        raise TargetError(f"{what}: category_id {category!r} is not an integer")
    crowd = obj.get("iscrowd", 0)
    if not isinstance(crowd, int) or crowd not in (0, 1):
        raise TargetError(f"{what}: iscrowd {crowd!r} is not 0 or 1")
    area = obj.get("area", 0.0)
    if not _is_number(area) or not 0 <= area <= _FLOAT32_MAX:
        raise TargetError(f"{what}: area {area!r} is not a finite number >= 0")
    if masks:
        _check_segmentation(obj.get("segmentation"), height, width, what=what)


def _check_segmentation(segmentation: Any, height: int, width: int, *, what: str) -> None:
    """Polygons inside the image (give or take :data:`OUTSIDE`: 1e12 would crash
    pycocotools), or an RLE of exactly its size."""
    if segmentation is None or segmentation == []:
        return  # no mask: an empty one
    if isinstance(segmentation, list):
        for polygon in segmentation:
            if not (
                isinstance(polygon, list)
                and len(polygon) >= 4
                and len(polygon) % 2 == 0
                and all(map(_is_number, polygon))
            ):
                shown = polygon if len(repr(polygon)) < 80 else f"{repr(polygon)[:76]}...]"
                raise TargetError(
                    f"{what}: polygon {shown} is not a list of at least two finite (x, y) points"
                )
            if not _inside(polygon[0::2], polygon[1::2], height, width):
                raise TargetError(
                    f"{what}: a polygon reaches outside the {width}x{height} image "
                    f"(x {min(polygon[0::2])}..{max(polygon[0::2])}, "
                    f"y {min(polygon[1::2])}..{max(polygon[1::2])})"
                )
        return
    if not isinstance(segmentation, dict):
        raise TargetError(
            f"{what}: segmentation is a {type(segmentation).__name__}, not polygons or an RLE"
        )
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if size != [height, width] or not all(map(_is_int64, size)):
        raise TargetError(f"{what}: RLE size {size!r} is not the image's [{height}, {width}]")
    if isinstance(counts, str):
        runs = _rle_string_counts(counts, what=what)
    elif isinstance(counts, list) and all(map(_is_int64, counts)):
        runs = counts
    else:
        raise TargetError(f"{what}: RLE counts are neither a string nor a list of integers")
    if min(runs, default=0) < 0:
        raise TargetError(f"{what}: RLE counts hold a negative run")
    if sum(runs) != height * width:
        raise TargetError(
            f"{what}: RLE counts cover {sum(runs)} pixels, the image has {height * width}"
        )


def _rle_string_counts(counts: str, *, what: str) -> list[int]:
    """The runs of COCO's compressed RLE string, decoded as pycocotools' rleFrString does
    but refusing what it would read past the end of, or wrap."""
    runs: list[int] = []
    position = 0
    while position < len(counts):
        value, shift, more = 0, 0, True
        while more:
            code = ord(counts[position]) - 48 if position < len(counts) else -1
            if not 0 <= code < 64 or shift > 30:
                raise TargetError(f"{what}: RLE counts {counts[:40]!r} are not COCO's encoding")
            value |= (code & 0x1F) << shift
            more, position, shift = bool(code & 0x20), position + 1, shift + 5
            if not more and code & 0x10:
                value |= -1 << shift
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


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
            "instance masks are rasterised by pycocotools: pip install '.[coco]'"
        ) from error
    return mask


def _instance_masks(
    objects: list[tuple[int, dict[str, Any]]],
    height: int,
    width: int,
    *,
    what: str,
    whats: Sequence[str],
) -> np.ndarray:
    """(K, H, W) uint8: each object's polygons or RLE (checked by :func:`_check_object`),
    as COCO's own API rasterises it. ``what`` names the image, ``whats`` each object: a
    segmentation that pycocotools still refuses is a TargetError naming it."""
    from fastload.decode.opencv import MAX_PIXELS

    if MAX_PIXELS is not None and len(objects) * height * width > MAX_PIXELS:
        raise TargetError(
            f"{what}: {len(objects)} instance masks of {width}x{height} are "
            f"{len(objects) * height * width:,} pixels, over the limit of {MAX_PIXELS:,}; raise "
            "fastload.decode.opencv.MAX_PIXELS to allow it"
        )
    coco_mask = _pycocotools_mask()
    masks = np.zeros((len(objects), height, width), np.uint8)
    for index, (_, obj) in enumerate(objects):
        segmentation = obj.get("segmentation")
        if not segmentation:
            continue
        try:
            masks[index] = _rasterise(coco_mask, segmentation, height, width)
        except Exception as error:
            # pycocotools refuses input with a bare Exception ("input type is not
            # supported."), OverflowError, ValueError or TypeError: the annotation's
            # fault, so skippable; anything else is a bug, and stays a traceback
            if type(error) not in (Exception, OverflowError, ValueError, TypeError):
                raise
            raise TargetError(
                f"{whats[index]}: pycocotools cannot rasterise the segmentation "
                f"({type(error).__name__}: {error})"
            ) from error
    return masks


def _rasterise(coco_mask: Any, segmentation: Any, height: int, width: int) -> np.ndarray:
    """One segmentation as pycocotools' ``COCO.annToMask`` reads its three forms."""
    if isinstance(segmentation, list):  # polygons
        # pycocotools reads a first polygon of four numbers as a box: two points, a
        # line, are given as three (the last one twice), the same polygon
        polygons = [p + p[-2:] if len(p) == 4 else p for p in segmentation]
        rle = coco_mask.merge(coco_mask.frPyObjects(polygons, height, width))
    elif isinstance(segmentation["counts"], list):  # uncompressed RLE
        rle = coco_mask.frPyObjects(segmentation, height, width)
    else:  # compressed RLE
        rle = segmentation
    mask: np.ndarray = coco_mask.decode(rle)
    return mask
