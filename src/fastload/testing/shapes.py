"""ShapesDetection: a deterministic detection and segmentation data set, generated on the
fly: filled shapes with known boxes and instance masks on photo-like backgrounds, so that
the detection example and tests run anywhere, with no download."""

from __future__ import annotations

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors

from fastload.testing.synthetic import photo_like_image

__all__ = ["ShapesDetection"]

#: Label 0 is the background, as torchvision's detection models expect.
SHAPES = ("background", "rectangle", "ellipse", "triangle")


class ShapesDetection(Dataset[tuple[tv_tensors.Image, dict[str, torch.Tensor]]]):
    """``length`` images of ``size`` (height, width), each with 1 to ``max_objects``
    shapes: rectangles, ellipses and triangles in colours of their own.

    ``dataset[i]`` is ``(image, target)`` as torchvision's detection datasets give it
    (``wrap_dataset_for_transforms_v2``): a uint8 CHW ``tv_tensors.Image`` and a dict of
    ``boxes`` (``BoundingBoxes``, XYXY, the tight box of each shape's mask), ``labels``
    (int64, 1 to 3, see :data:`SHAPES`) and ``masks`` (``Mask``, (K, H, W) uint8). The
    same index gives the same sample, whatever the process.

    Example:
        >>> image, target = ShapesDetection(4, size=(60, 80))[0]
        >>> image.shape, target["masks"].shape[1:], target["boxes"].canvas_size
        (torch.Size([3, 60, 80]), torch.Size([60, 80]), (60, 80))
    """

    num_classes = len(SHAPES)

    def __init__(
        self,
        length: int,
        *,
        size: tuple[int, int] = (240, 320),
        max_objects: int = 4,
        seed: int = 0,
    ) -> None:
        if length < 0 or max_objects < 1 or min(size) < 16:
            raise ValueError(
                f"need length >= 0, max_objects >= 1 and both sides >= 16, got {length}, "
                f"{max_objects} and {size}"
            )
        self.length, self.size, self.max_objects, self.seed = length, tuple(size), max_objects, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[tv_tensors.Image, dict[str, torch.Tensor]]:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} of a ShapesDetection of {self.length}")
        rng = np.random.default_rng([self.seed, index % self.length])
        height, width = self.size
        image = cv2.cvtColor(photo_like_image(rng, height, width), cv2.COLOR_BGR2RGB)
        masks: list[np.ndarray] = []
        labels: list[int] = []
        for _ in range(int(rng.integers(1, self.max_objects + 1))):
            label = int(rng.integers(1, len(SHAPES)))
            mask = _shape(rng, label, height, width)
            if not mask.any():
                continue
            image[mask.astype(bool)] = rng.integers(0, 256, 3)
            for earlier in masks:  # a shape hides what it covers: masks are what shows
                earlier[mask.astype(bool)] = 0
            masks.append(mask)
            labels.append(label)
        shown = [i for i, mask in enumerate(masks) if mask.any()]
        masks, labels = [masks[i] for i in shown], [labels[i] for i in shown]
        stacked = np.stack(masks) if masks else np.zeros((0, height, width), np.uint8)
        boxes = [_tight_box(mask) for mask in stacked]
        target = {
            "boxes": tv_tensors.BoundingBoxes(
                torch.tensor(boxes, dtype=torch.float32).view(-1, 4), format="XYXY",
                canvas_size=(height, width),
            ),
            "labels": torch.tensor(labels, dtype=torch.int64),
            "masks": tv_tensors.Mask(torch.from_numpy(stacked)),
        }  # fmt: skip
        return tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1).contiguous()), target


def _shape(rng: np.random.Generator, label: int, height: int, width: int) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    h = int(rng.integers(height // 6, height // 2))
    w = int(rng.integers(width // 6, width // 2))
    top, left = int(rng.integers(0, height - h)), int(rng.integers(0, width - w))
    if SHAPES[label] == "rectangle":
        mask[top : top + h, left : left + w] = 1
    elif SHAPES[label] == "ellipse":
        cv2.ellipse(mask, (left + w // 2, top + h // 2), (w // 2, h // 2), 0, 0, 360, 1, -1)
    else:
        corners = np.array([[left, top + h - 1], [left + w - 1, top + h - 1], [left + w // 2, top]])
        cv2.fillPoly(mask, [corners.astype(np.int32)], 1)
    return mask


def _tight_box(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]
