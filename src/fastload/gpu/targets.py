"""Detection and segmentation targets beside the image batch: torchvision's ``tv_tensors``
found in whatever structure a module is called with, as torchvision v2 finds them.

A batch call looks like torchvision's per-sample one, with a batch where the image is:

    images, targets = module(images, [{"boxes": BoundingBoxes(...), "labels": ...}, ...])
    images, masks = module(images, Mask(masks))            # masks (N, H, W) or (N, K, H, W)

``BoundingBoxes`` and ``KeyPoints`` leaves hold one sample each (their counts differ per
image), and belong to samples 0, 1, ... in the order they appear. A ``Mask`` beside them
in the same container (an image's target dict) is that image's own, (K, H, W) instance
masks or (H, W), whatever else the target holds. A ``Mask`` in a list of one item per
image (``[{"mask": Mask}, ...]``, or ``[Mask, ...]``) is the image's at its place in the
list; in a list of another length it is refused. Any other ``Mask`` holds the whole
batch, (N, H, W) or (N, K, H, W).
Everything else passes through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn
from torchvision import tv_tensors
from torchvision.transforms import v2

from fastload.batches import Path, is_target, map_tensors, tensor_leaves

__all__ = [
    "SanitizeBoundingBoxes",
    "Split",
    "join",
    "split",
]

#: Targets with one leaf per sample (a list of them follows the batch).
PER_SAMPLE: tuple[type, ...] = (tv_tensors.BoundingBoxes,) + (
    (tv_tensors.KeyPoints,) if hasattr(tv_tensors, "KeyPoints") else ()
)


class Split:
    """A call's inputs taken apart: the leaves, where the image batch is, how to rebuild,
    and which masks are one image's (those beside boxes or keypoints in its target)."""

    def __init__(
        self, root: Any, paths: list[Path], leaves: list[Tensor], image: int,
        per_image_masks: dict[int, int],
    ) -> None:  # fmt: skip
        self.root, self.paths, self.leaves, self.image = root, paths, leaves, image
        self.per_image_masks = per_image_masks

    @property
    def images(self) -> Tensor:
        images: Tensor = self.leaves[self.image]
        return images

    def targets(self) -> list[tuple[int, Any]]:
        return [(index, leaf) for index, leaf in enumerate(self.leaves) if is_target(leaf)]


def split(inputs: tuple[Any, ...], name: str) -> Split:
    """Find the image batch among ``inputs``: a ``tv_tensors.Image``, else the first plain
    4-D tensor; raise naming ``name`` when there is none."""
    root = inputs[0] if len(inputs) == 1 else inputs
    with_paths = tensor_leaves(root)
    leaves = [leaf for _, leaf in with_paths]
    candidates = [i for i, leaf in enumerate(leaves) if isinstance(leaf, tv_tensors.Image)]
    if not candidates:
        candidates = [
            i
            for i, leaf in enumerate(leaves)
            if isinstance(leaf, Tensor) and not is_target(leaf) and leaf.dim() == 4
        ]
    if not candidates:
        raise TypeError(
            f"{name} found no image batch among its inputs: give an (N, C, H, W) tensor "
            "(or a tv_tensors.Image) beside the masks, boxes or keypoints"
        )
    image = candidates[0]
    owners = _mask_owners(root, with_paths, len(leaves[image]), name)
    return Split(root, [path for path, _ in with_paths], leaves, image, owners)


def _mask_owners(
    root: Any, with_paths: list[tuple[Path, Tensor]], batch: int, name: str
) -> dict[int, int]:
    """Which leaves are one image's masks, and whose: those beside its boxes in its target
    (the target's place among the targets), else those at place ``i`` of a list of the
    batch's ``batch`` per-image items (image ``i``'s, as torchvision v2 pairs a sample
    with its target)."""
    targets: dict[Path, int] = {}
    for path, leaf in with_paths:
        if isinstance(leaf, PER_SAMPLE):
            targets.setdefault(path[:-1], len(targets))
    owners: dict[int, int] = {}
    for index, (path, leaf) in enumerate(with_paths):
        if not isinstance(leaf, tv_tensors.Mask):
            continue
        if path[:-1] in targets:
            owners[index] = targets[path[:-1]]
            continue
        # Below the top level (the call's arguments, or a batch's fields), a list of
        # target dicts, or of Masks, holds one item per image.
        for depth in range(len(path) - 1, 0, -1):
            items = _at(root, path[:depth])
            if not _is_per_image_list(items):
                continue
            if len(items) != batch:
                raise ValueError(
                    f"{name} cannot tell which image the Mask at {path} belongs to: it "
                    f"sits in a list of {len(items)} targets for {batch} images; give "
                    "one target per image, or the batch's masks as one (N, H, W) or "
                    "(N, K, H, W) Mask"
                )
            owners[index] = path[depth]
            break
    return owners


def _is_per_image_list(items: Any) -> bool:
    if not isinstance(items, (list, tuple)) or hasattr(items, "_fields") or not items:
        return False
    return all(isinstance(item, Mapping) for item in items) or all(
        isinstance(item, tv_tensors.Mask) for item in items
    )


def _at(root: Any, path: Path) -> Any:
    """The item of ``root`` that ``path`` (as :func:`tensor_leaves` gives it) leads to."""
    for key in path:
        is_field = dataclasses.is_dataclass(root) and isinstance(key, str)
        root = getattr(root, key) if is_field else root[key]
    return root


def join(parts: Split, leaves: list[Any]) -> Any:
    """The inputs' structure rebuilt around new tensor ``leaves`` (in :attr:`Split.leaves`'
    order); other leaves are kept as they were."""
    new = dict(zip(parts.paths, leaves, strict=True))
    return map_tensors(parts.root, lambda path, _: new[path])


class SanitizeBoundingBoxes(nn.Module):
    """Remove degenerate boxes, with their labels and masks, from each image's target.

    Degenerate: smaller than ``min_size``, or outside the image after a crop; their
    labels, per-instance masks and other per-box leaves go with them: torchvision v2's
    ``SanitizeBoundingBoxes`` applied to every image's target.

    Call it as the batch modules are called: ``images, targets = module(images, targets)``
    with ``targets`` a list of per-image dicts (``labels_getter="default"`` finds their
    ``"labels"``); the images pass through. Other arguments (``min_area`` where your
    torchvision has it) go to torchvision's transform.

    Args:
        min_size: The smallest width and height a box keeps, in pixels (>= 1).
        labels_getter: Where the labels are: "default" (the ``"labels"`` entry), a
            callable given the target, or None (no labels).
        **kwargs: Further arguments of torchvision's ``SanitizeBoundingBoxes``.

    Raises:
        ValueError: A ``min_size`` below 1 or a ``labels_getter`` torchvision refuses; on a
            call, not one target per image, or a target whose labels are not found.
        TypeError: On a call, ``targets`` that are not a list or tuple.

    Example:
        >>> import torch
        >>> boxes = tv_tensors.BoundingBoxes(
        ...     [[0, 0, 4, 4], [2, 2, 2, 6]], format="XYXY", canvas_size=(8, 8)
        ... )
        >>> target = {"boxes": boxes, "labels": torch.tensor([1, 2])}
        >>> _, (kept,) = SanitizeBoundingBoxes()(torch.zeros(1, 3, 8, 8), [target])
        >>> kept["labels"].tolist()  # the second box has no width
        [1]
    """

    def __init__(self, min_size: float = 1.0, labels_getter: Any = "default", **kwargs: Any):
        super().__init__()
        self.sanitize = v2.SanitizeBoundingBoxes(
            min_size=min_size, labels_getter=labels_getter, **kwargs
        )

    def forward(self, images: Tensor, targets: list[Any]) -> tuple[Tensor, list[Any]]:
        if not isinstance(targets, (list, tuple)):
            raise TypeError(
                "SanitizeBoundingBoxes takes (images, targets) with targets a list holding "
                f"each image's target, got {type(targets).__name__}"
            )
        if len(targets) != len(images):
            raise ValueError(
                f"SanitizeBoundingBoxes: {len(targets)} targets for {len(images)} images"
            )
        return images, [self.sanitize(target) for target in targets]
