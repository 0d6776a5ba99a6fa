"""Detection and segmentation targets in records: a dict of ``tv_tensors`` and tensors
becomes named fields with roles, and back; a presize scales them with the image.

Roles: ``"boxes.<FORMAT>"`` (``BoundingBoxes`` in one of torchvision's formats),
``"mask"`` (``Mask``), ``"keypoints"`` (``KeyPoints`` where torchvision has them) and
``"array"`` (a plain tensor: labels, ids, areas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors

from fastload.lmdb.format import Field

__all__ = ["TargetError", "fields_target", "resize_fields", "target_fields"]

BOXES, MASK, KEYPOINTS, ARRAY = "boxes.", "mask", "keypoints", "array"
_KEYPOINTS = getattr(tv_tensors, "KeyPoints", None)  # torchvision >= 0.23
_AXIS_ALIGNED = {"XYXY", "XYWH", "CXCYWH"}  # what a resize scales per axis


class TargetError(ValueError):
    """A target (boxes, masks, a COCO annotation) that cannot be stored as it is; the
    message names the item and the entry. ``write_lmdb(skip_bad=True)`` skips its item."""


def target_fields(target: Mapping[str, Any], *, what: str) -> dict[str, Field]:
    """The fields of a torchvision-style target dict (``what`` names it in errors).

    Example:
        >>> target_fields({"labels": torch.tensor([3, 1])}, what="doc")
        {'labels': Field(role='array', array=array([3, 1]))}
    """
    fields = {}
    for name, value in target.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: target keys must be strings, got {name!r}")
        if isinstance(value, tv_tensors.BoundingBoxes):
            role = BOXES + value.format.name
        elif isinstance(value, tv_tensors.Mask):
            role = MASK
        elif _KEYPOINTS is not None and isinstance(value, _KEYPOINTS):
            role = KEYPOINTS
        elif isinstance(value, (torch.Tensor, np.ndarray, int, float, bool, np.generic)):
            role = ARRAY
        else:
            raise TypeError(
                f"{what}: target {name!r} is a {type(value).__name__}; records store tensors, "
                "arrays and numbers"
            )
        array = value.numpy(force=True) if isinstance(value, torch.Tensor) else np.asarray(value)
        fields[name] = Field(role, array)
    return fields


def fields_target(
    fields: Mapping[str, Field], canvas_size: tuple[int, int], *, what: str
) -> dict[str, Any]:
    """The target dict of a record's ``fields`` for an image of ``canvas_size`` (H, W).

    Example:
        >>> boxes = Field("boxes.XYXY", np.array([[1, 2, 30, 40]], np.float32))
        >>> fields_target({"boxes": boxes}, (48, 64), what="doc")["boxes"].canvas_size
        (48, 64)
    """
    target: dict[str, Any] = {}
    for name, (role, array) in fields.items():
        data = torch.from_numpy(array)
        if role.startswith(BOXES):
            box_format = role.removeprefix(BOXES)
            if box_format not in tv_tensors.BoundingBoxFormat.__members__:
                raise ValueError(f"{what}: field {name!r} has boxes in unknown format {role!r}")
            target[name] = tv_tensors.BoundingBoxes(
                data, format=box_format, canvas_size=canvas_size
            )
        elif role == MASK:
            target[name] = tv_tensors.Mask(data)
        elif role == KEYPOINTS:
            target[name] = data if _KEYPOINTS is None else _KEYPOINTS(data, canvas_size=canvas_size)
        elif role == ARRAY:
            target[name] = data
        else:
            raise ValueError(
                f"{what}: field {name!r} has role {role!r}, unknown to this fastload "
                "(a newer one wrote it?)"
            )
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
