"""Detection and segmentation targets in records: a dict of ``tv_tensors`` and tensors
becomes named fields with roles, and back; a presize scales them with the image.

Roles: ``"boxes.<FORMAT>"`` (``BoundingBoxes`` in one of torchvision's formats),
``"mask"`` (``Mask``), ``"keypoints"`` (``KeyPoints`` where torchvision has them) and
``"array"`` (a plain tensor: labels, ids, areas).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fastload.records.format import Field, RecordFormatError

__all__ = ["TargetError", "fields_target", "resize_fields", "target_fields"]

BOXES, MASK, KEYPOINTS, ARRAY = "boxes.", "mask", "keypoints", "array"
_AXIS_ALIGNED = {"XYXY", "XYWH", "CXCYWH"}  # what a resize scales per axis
#: How far outside its image a box may reach, in pixels: datasets' reach a little past
#: the border (COCO's do). Farther is a broken annotation.
OUTSIDE = 16.0


def _keypoints() -> type | None:
    """torchvision's ``KeyPoints`` (torchvision >= 0.23), else None. torchvision is imported
    here, not with this module: importing it loads its models, which reading a record
    without targets (``fastload info``) has no use for."""
    from torchvision import tv_tensors

    return getattr(tv_tensors, "KeyPoints", None)


@functools.cache
def _box_values() -> dict[str, int]:
    """Numbers per box of each of torchvision's formats this fastload knows (that
    torchvision has: older ones lack the rotated formats)."""
    from torchvision import tv_tensors

    return {
        name: {"XYWHR": 5, "CXCYWHR": 5, "XYXYXYXY": 8}.get(name, 4)
        for name in tv_tensors.BoundingBoxFormat.__members__
    }


class TargetError(ValueError):
    """A target (boxes, masks, a COCO annotation) that cannot be stored as it is.

    The message names the item and the entry. ``write_lmdb(skip_bad=True)`` skips its
    item.

    Example:
        >>> from fastload.records.targets import target_fields
        >>> target_fields({1: [0, 0, 4, 4]}, what="item 3")
        Traceback (most recent call last):
        ...
        fastload.records.targets.TargetError: item 3: target keys must be strings, got 1
    """


def target_fields(
    target: Mapping[str, Any], *, what: str, size: tuple[int, int] | None = None
) -> dict[str, Field]:
    """The fields of a torchvision-style target dict (``what`` names it in errors). With
    the image's ``size`` (H, W), boxes and masks are checked against it.

    Raises:
        TargetError: A value that records do not store, boxes that are not finite, not
            for this image or outside it, masks of another size.

    Example:
        >>> target_fields({"labels": torch.tensor([3, 1])}, what="doc")
        {'labels': Field(role='array', array=array([3, 1]))}
    """
    from torchvision import tv_tensors

    keypoints = _keypoints()
    fields = {}
    for name, value in target.items():
        if not isinstance(name, str):
            raise TargetError(f"{what}: target keys must be strings, got {name!r}")
        if isinstance(value, tv_tensors.BoundingBoxes):
            role = BOXES + value.format.name
        elif isinstance(value, tv_tensors.Mask):
            role = MASK
        elif keypoints is not None and isinstance(value, keypoints):
            role = KEYPOINTS
        elif isinstance(value, (torch.Tensor, np.ndarray, int, float, bool, np.generic)):
            role = ARRAY
        else:
            raise TargetError(
                f"{what}: target {name!r} is a {type(value).__name__}; records store tensors, "
                "arrays and numbers"
            )
        try:
            array = (
                value.numpy(force=True) if isinstance(value, torch.Tensor) else np.asarray(value)
            )
        except (TypeError, RuntimeError) as error:  # a sparse or quantised tensor
            raise TargetError(f"{what}: target {name!r} cannot be stored ({error})") from error
        where = f"{what}: target {name!r}"
        _check_shape(role, array.shape, None, what=where, error=TargetError)
        if size is not None:
            _check_against_image(role, array, value, size, what=where)
        fields[name] = Field(role, array)
    return fields


def _check_against_image(
    role: str, array: np.ndarray, value: Any, size: tuple[int, int], *, what: str
) -> None:
    """Boxes finite, for an image of ``size`` and inside it (give or take
    :data:`OUTSIDE`), XYXY corners in order; masks of the image's size."""
    height, width = size
    if role == MASK and array.shape[-2:] != size:
        raise TargetError(
            f"{what}: masks of {array.shape[-1]}x{array.shape[-2]}, the image is {width}x{height}"
        )
    if not role.startswith(BOXES):
        return
    if tuple(value.canvas_size) != size:
        raise TargetError(
            f"{what}: boxes for a canvas of {tuple(value.canvas_size)}, the image is {size}"
        )
    boxes = array.reshape(-1, array.shape[-1]).astype(np.float64)
    if not np.isfinite(boxes).all():
        raise TargetError(f"{what}: boxes that are not finite (NaN or infinite)")
    box_format = role.removeprefix(BOXES)
    if box_format not in _AXIS_ALIGNED:
        return
    if box_format == "XYXY":
        low, high = boxes[:, :2], boxes[:, 2:]
    elif box_format == "XYWH":
        low, high = boxes[:, :2], boxes[:, :2] + boxes[:, 2:]
    else:  # CXCYWH
        low, high = boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2
    if (high < low).any():
        raise TargetError(f"{what}: {box_format} boxes with a negative width or height")
    if (low < -OUTSIDE).any() or (high > np.array([width, height]) + OUTSIDE).any():
        raise TargetError(
            f"{what}: boxes outside the {width}x{height} image (x {low[:, 0].min()}.."
            f"{high[:, 0].max()}, y {low[:, 1].min()}..{high[:, 1].max()})"
        )


def _check_shape(
    role: str, shape: tuple[int, ...], canvas: tuple[int, int] | None, *, what: str, error: type
) -> None:
    """Boxes (N, 4), (N, 5) rotated or (N, 8) corners; keypoints (..., 2); masks (..., H, W)
    with (H, W) the ``canvas`` where it is known."""
    if role.startswith(BOXES):
        box_format = role.removeprefix(BOXES)
        values = _box_values().get(box_format)
        if values is None:
            raise error(f"{what} has boxes in unknown format {role!r}")
        if len(shape) not in (1, 2) or shape[-1] != values:
            raise error(f"{what}: {box_format} boxes of shape {shape}, not (N, {values})")
    elif role == KEYPOINTS and (not shape or shape[-1] != 2):
        raise error(f"{what}: keypoints of shape {shape}, not (..., 2)")
    elif role == MASK and (len(shape) < 2 or (canvas is not None and shape[-2:] != canvas)):
        raise error(f"{what}: masks of shape {shape} for an image of {canvas}")


def fields_target(
    fields: Mapping[str, Field], canvas_size: tuple[int, int], *, what: str
) -> dict[str, Any]:
    """The target dict of a record's ``fields`` for an image of ``canvas_size`` (H, W).

    Raises:
        RecordFormatError: A role this fastload does not know, or a shape its role and
            the image do not allow (a damaged or forged record).

    Example:
        >>> boxes = Field("boxes.XYXY", np.array([[1, 2, 30, 40]], np.float32))
        >>> fields_target({"boxes": boxes}, (48, 64), what="doc")["boxes"].canvas_size
        (48, 64)
    """
    from torchvision import tv_tensors

    keypoints = _keypoints()
    target: dict[str, Any] = {}
    canvas_size = (canvas_size[0], canvas_size[1])
    for name, (role, array) in fields.items():
        where = f"{what}: field {name!r}"
        if role not in (MASK, KEYPOINTS, ARRAY) and not role.startswith(BOXES):
            raise RecordFormatError(
                f"{where} has role {role!r}, unknown to this fastload (a newer one wrote it?)"
            )
        _check_shape(role, array.shape, canvas_size, what=where, error=RecordFormatError)
        data = torch.from_numpy(array)
        if role.startswith(BOXES):
            target[name] = tv_tensors.BoundingBoxes(
                data, format=role.removeprefix(BOXES), canvas_size=canvas_size
            )
        elif role == MASK:
            target[name] = tv_tensors.Mask(data)
        elif role == KEYPOINTS:
            target[name] = data if keypoints is None else keypoints(data, canvas_size=canvas_size)
        else:
            target[name] = data
    return target


def resize_fields(
    fields: Mapping[str, Field], old: tuple[int, int], new: tuple[int, int], *, what: str
) -> dict[str, Field]:
    """``fields`` of an image resized from ``old`` to ``new`` (H, W): boxes and keypoints
    scaled per axis, masks resized with nearest neighbours."""
    if old == new:
        return dict(fields)
    scale_y, scale_x = new[0] / old[0], new[1] / old[1]
    resized = {}
    for name, (role, array) in fields.items():
        if role.startswith(BOXES):
            if role.removeprefix(BOXES) not in _AXIS_ALIGNED:
                raise ValueError(f"{what}: cannot presize {name!r}, rotated boxes ({role})")
            array = array * np.array([scale_x, scale_y] * 2, np.float32)
        elif role == KEYPOINTS:
            array = array * np.array([scale_x, scale_y], np.float32)
        elif role == MASK:
            array = _resize_nearest(array, new)
        resized[name] = Field(role, array.astype(fields[name].array.dtype, copy=False))
    return resized


def _resize_nearest(masks: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """OpenCV's INTER_NEAREST (source pixel floor(i * old / new)), for any dtype."""
    (height, width), (old_height, old_width) = size, masks.shape[-2:]
    rows = np.arange(height) * old_height // height
    cols = np.arange(width) * old_width // width
    return np.ascontiguousarray(masks[..., rows[:, None], cols])
