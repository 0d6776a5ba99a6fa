"""Detection and segmentation targets beside the image batch: torchvision's ``tv_tensors``
found in whatever structure a module is called with, as torchvision v2 finds them.

A batch call looks like torchvision's per-sample one, with a batch where the image is:

    images, targets = module(images, [{"boxes": BoundingBoxes(...), "labels": ...}, ...])
    images, masks = module(images, Mask(masks))            # masks (N, H, W) or (N, K, H, W)

``BoundingBoxes`` and ``KeyPoints`` leaves hold one sample each (their counts differ per
image), and belong to samples 0, 1, ... in the order they appear. A ``Mask`` beside them
in the same container (an image's target dict) is that image's own, (K, H, W) instance
masks or (H, W), whatever else the target holds; a ``Mask`` in a list of per-image
targets without boxes cannot be placed and is refused; any other ``Mask`` holds the whole
batch, (N, H, W) or (N, K, H, W).
Everything else passes through.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torchvision import tv_tensors
from torchvision.transforms import v2

from fastload.batches import PER_SAMPLE, Path, is_target, map_tensors, tensor_leaves

__all__ = [
    "SanitizeBoundingBoxes",
    "Split",
    "has_targets",
    "join",
    "split",
]


def has_targets(value: Any) -> bool:
    """Whether ``value`` (a tensor, or any structure of them) holds a target."""
    if isinstance(value, Tensor):
        return is_target(value)
    return any(is_target(leaf) for _, leaf in tensor_leaves(value))


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
    # An image's own masks sit in its target, beside its boxes (the same parent): the
    # sample is that target's place among the targets, whatever else a target holds.
    targets: dict[Path, int] = {}
    for path, leaf in with_paths:
        if isinstance(leaf, PER_SAMPLE):
            targets.setdefault(path[:-1], len(targets))
    per_image_masks: dict[int, int] = {}
    for index, (path, leaf) in enumerate(with_paths):
        if not isinstance(leaf, tv_tensors.Mask):
            continue
        if path[:-1] in targets:
            per_image_masks[index] = targets[path[:-1]]
        elif any(isinstance(key, int) for key in path[1:]):
            # below the top level (an argument, or a field of a batch), in a list of
            # per-image targets, with no boxes to say whose it is
            raise ValueError(
                f"{name} cannot tell which image the Mask at {path} belongs to: put it in "
                "its image's target beside that image's BoundingBoxes (or KeyPoints), or "
                "give the batch's masks as one (N, H, W) or (N, K, H, W) Mask"
            )
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
    return Split(root, [path for path, _ in with_paths], leaves, candidates[0], per_image_masks)


def join(parts: Split, leaves: list[Any]) -> Any:
    """The inputs' structure rebuilt around new tensor ``leaves`` (in :attr:`Split.leaves`'
    order); other leaves are kept as they were."""
    new = dict(zip(parts.paths, leaves, strict=True))
    return map_tensors(parts.root, lambda path, _: new[path])


class SanitizeBoundingBoxes(nn.Module):
    """Remove degenerate boxes (smaller than ``min_size``, or outside the image after a
    crop) and their labels, per-instance masks and other per-box leaves, from each image's
    target: torchvision v2's ``SanitizeBoundingBoxes`` applied to every image's target.

    Call it as the batch modules are called: ``images, targets = module(images, targets)``
    with ``targets`` a list of per-image dicts (``labels_getter="default"`` finds their
    ``"labels"``); the images pass through. Other arguments (``min_area`` where your
    torchvision has it) go to torchvision's transform.
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
