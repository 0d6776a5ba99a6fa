"""MixUp and CutMix: mix each image with its neighbour in the batch, labels too.

Unlike the other modules these take ``(images, labels)`` and return both, so they run
in the training loop (after DataPrefetcher), as torchvision's MixUp and CutMix do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fastload._checks import check_int, finite
from fastload.gpu.base import BatchTransform, Params, check_images
from fastload.gpu.functional import cutmix, mixup

__all__ = ["CutMix", "MixUp"]


class _Mix(BatchTransform):
    def __init__(
        self,
        *,
        alpha: float = 1.0,
        num_classes: int,
        p: float = 1.0,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        if finite(alpha, "alpha") <= 0:
            raise ValueError(f"alpha must be positive, got {alpha}")
        self.alpha = float(alpha)
        self.num_classes = check_int(num_classes, "num_classes", low=1)

    # (images, labels) in, (images, soft labels) out, as torchvision's MixUp/CutMix: not the
    # images-only signature of the other modules.
    def forward(  # type: ignore[override]
        self, images: Tensor, labels: Tensor, params: Params | None = None
    ) -> tuple[Tensor, Tensor]:
        check_images(images, type(self).__name__)
        if not isinstance(labels, Tensor) or labels.shape[:1] != images.shape[:1]:
            raise ValueError(
                f"{type(self).__name__} needs one label per image, "
                f"got labels of shape {getattr(labels, 'shape', None)}"
            )
        if labels.dim() == 1:
            if labels.dtype not in (torch.int64, torch.int32, torch.uint8):
                raise TypeError(f"class labels must be integers, got {labels.dtype}")
            labels = F.one_hot(labels.long(), self.num_classes)
        elif labels.shape[1] != self.num_classes:
            raise ValueError(
                f"labels have {labels.shape[1]} classes, expected num_classes={self.num_classes}"
            )
        if params is None:
            params = self.sample_params(images.shape, images.device, self.generator)
        with torch.autocast(images.device.type, enabled=False):
            mixed, lam = self.apply_transform(images, params)
            soft = labels.float()
            weight = lam.view(-1, 1)
            return mixed, weight * soft + (1 - weight) * soft.roll(1, dims=0)


class MixUp(_Mix):
    """Mix each image with the one before it in the batch, and their labels alike.

    ``lam * image + (1 - lam) * previous image`` with ``lam ~ Beta(alpha, alpha)`` per
    sample (torchvision's pairing: each sample with the one before it).

    Called as ``mixed, soft_labels = module(images, labels)``, with ``labels`` the class
    indices (N,) or (N, ``num_classes``) probabilities; the soft labels are float
    (N, ``num_classes``).

    Args:
        alpha: The Beta distribution's parameter.
        num_classes: How many classes the labels have.
        p: Probability of mixing each image.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: An ``alpha`` that is not positive, a ``num_classes`` that is not an
            int >= 1, or ``p`` not a probability; on a call, not one label per image, or
            probabilities for another number of classes.
        TypeError: On a call, class indices that are not integers.
        RuntimeError: On a call, a class index >= ``num_classes`` (torch's ``one_hot``).

    Example:
        >>> images = torch.stack([torch.zeros(3, 4, 4), torch.ones(3, 4, 4)])  # 0 and 1
        >>> _ = torch.manual_seed(0)
        >>> mixed, soft = MixUp(num_classes=2)(images, torch.tensor([0, 1]))
        >>> soft.sum(dim=1).tolist(), torch.allclose(mixed.mean(dim=(1, 2, 3)), soft[:, 1])
        ([1.0, 1.0], True)
    """

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        lam = self._beta(n, self.alpha, device, generator)
        return {"lam": torch.where(self._applies(n, device, generator), lam, torch.ones_like(lam))}

    def apply_transform(  # type: ignore[override]
        self, images: Tensor, params: Params
    ) -> tuple[Tensor, Tensor]:
        return mixup(images, params["lam"]), params["lam"]


class CutMix(_Mix):
    """Paste a box of the previous image into each image, and mix the labels by its area.

    The box covers ``1 - lam`` of the image, ``lam ~ Beta(alpha, alpha)`` per sample, and
    the labels mix by the area pasted.

    Called as ``mixed, soft_labels = module(images, labels)``, with ``labels`` the class
    indices (N,) or (N, ``num_classes``) probabilities; the soft labels are float
    (N, ``num_classes``).

    Args:
        alpha: The Beta distribution's parameter.
        num_classes: How many classes the labels have.
        p: Probability of mixing each image.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: An ``alpha`` that is not positive, a ``num_classes`` that is not an
            int >= 1, or ``p`` not a probability; on a call, not one label per image, or
            probabilities for another number of classes.
        TypeError: On a call, class indices that are not integers.
        RuntimeError: On a call, a class index >= ``num_classes`` (torch's ``one_hot``).

    Example:
        >>> images = torch.stack([torch.zeros(3, 4, 4), torch.ones(3, 4, 4)])  # 0 and 1
        >>> _ = torch.manual_seed(0)
        >>> mixed, soft = CutMix(num_classes=2)(images, torch.tensor([0, 1]))
        >>> soft.tolist()
        [[0.75, 0.25], [0.25, 0.75]]
        >>> torch.equal(mixed.mean(dim=(1, 2, 3)), soft[:, 1])  # the area of the ones
        True
    """

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, _, height, width = shape
        lam = self._beta(n, self.alpha, device, generator)
        centre = self._rand(n, 2, device=device, generator=generator)
        cut = torch.sqrt(1.0 - lam)
        cy, cx = centre[:, 0] * height, centre[:, 1] * width
        half_h, half_w = cut * height / 2, cut * width / 2
        top, bottom = (cy - half_h).round().clamp(0, height), (cy + half_h).round().clamp(0, height)
        left, right = (cx - half_w).round().clamp(0, width), (cx + half_w).round().clamp(0, width)
        apply = self._applies(n, device, generator)
        box_h = torch.where(apply, bottom - top, torch.zeros_like(top))
        box_w = torch.where(apply, right - left, torch.zeros_like(left))
        return {"top": top, "left": left, "height": box_h, "width": box_w}

    def apply_transform(  # type: ignore[override]
        self, images: Tensor, params: Params
    ) -> tuple[Tensor, Tensor]:
        height, width = images.shape[-2:]
        box = (params[key] for key in ("top", "left", "height", "width"))
        pasted = cutmix(images, *box)
        lam = 1.0 - params["height"] * params["width"] / (height * width)  # the area actually kept
        return pasted, lam
