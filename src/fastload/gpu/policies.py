"""Automatic augmentation policies on the batch: RandAugment, TrivialAugmentWide and
AutoAugment (AugMix, which mixes chains of them: :mod:`fastload.gpu.augmix`), each sample
drawing its own operations and magnitudes.

The operation lists, magnitude tables, signs and AutoAugment's sub-policies are
torchvision v2's own (read from its classes, not copied), and each operation is applied
as torchvision applies it. A batch is processed without a loop over samples: for each
step, the samples that drew the same operation are transformed together (a loop over at
most 15 operations). ``sample_params`` returns, per sample and step, the operation's
index in ``op_names`` (-1 where AutoAugment skipped it) and its signed magnitude, so a
draw can be replayed and compared with torchvision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchvision.transforms import AutoAugmentPolicy, InterpolationMode, v2

from fastload._checks import check_int
from fastload.gpu.arguments import resampling
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import (
    Fill,
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    adjust_sharpness,
    affine,
    autocontrast,
    equalize,
    inverse_affine_matrices,
    invert,
    max_value,
    posterize,
    solarize,
)
from fastload.gpu.rows import apply_each_drawn

__all__ = [
    "AutoAugment",
    "AutoAugmentPolicy",
    "RandAugment",
    "TrivialAugmentWide",
    "apply_op",
]

Space = dict[str, tuple[Callable[[int, int, int], Tensor | None], bool]]


def _shear_or_shift(
    images: Tensor, magnitude: Tensor, op: str, interpolation: str, fill: Fill
) -> Tensor:
    n, device = len(images), images.device
    zeros, ones = torch.zeros(n, device=device), torch.ones(n, device=device)
    shear = torch.zeros(n, 2, device=device, dtype=torch.float64)  # torchvision's precision
    translate = torch.zeros(n, 2, device=device)
    center = None
    if op in ("ShearX", "ShearY"):  # torchvision shears about the top-left corner
        shear[:, 0 if op == "ShearX" else 1] = torch.rad2deg(torch.atan(magnitude.double()))
        height, width = images.shape[-2:]
        center = torch.tensor([-0.5 * width, -0.5 * height], device=device).expand(n, 2)
    else:  # whole pixels, truncated as int() does
        translate[:, 0 if op == "TranslateX" else 1] = magnitude.trunc()
    return affine(images, inverse_affine_matrices(zeros, translate, ones, shear, center),
                  interpolation, fill)  # fmt: skip


def apply_op(
    images: Tensor, op: str, magnitude: Tensor, interpolation: str = "nearest", fill: Fill = None
) -> Tensor:
    """One of the policies' operations on every image of ``images``, with each sample's
    ``magnitude`` (N,), as torchvision's policies apply it."""
    n, device = len(images), images.device
    if op == "Identity":
        return images
    if op in ("ShearX", "ShearY", "TranslateX", "TranslateY"):
        return _shear_or_shift(images, magnitude, op, interpolation, fill)
    if op == "Rotate":  # torchvision's rotate turns the other way from its affine
        none, ones = torch.zeros(n, 2, device=device), torch.ones(n, device=device)
        return affine(images, inverse_affine_matrices(-magnitude, none, ones, none),
                      interpolation, fill)  # fmt: skip
    factor = 1.0 + magnitude.double()
    if op == "Brightness":
        return adjust_brightness(images, factor)
    if op == "Color":
        return adjust_saturation(images, factor)
    if op == "Contrast":
        return adjust_contrast(images, factor)
    if op == "Sharpness":
        return adjust_sharpness(images, factor)
    if op == "Posterize":
        return posterize(images, magnitude.trunc().to(torch.int64))
    if op == "Solarize":
        return solarize(images, magnitude * max_value(images.dtype))
    if op == "AutoContrast":
        return autocontrast(images)
    if op == "Equalize":
        return equalize(images)
    if op == "Invert":
        return invert(images)
    raise ValueError(f"no operation named {op!r}")


class Policy(BatchTransform):
    """Draw ``ops`` (N, steps) and ``magnitudes`` (N, steps); apply them step by step,
    grouping the samples that drew the same operation."""

    space: Space

    def __init__(
        self,
        interpolation: InterpolationMode | str,
        fill: Fill,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(same_on_batch=same_on_batch, generator=generator)
        self.interpolation, self.fill = resampling(interpolation, fill)

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(self.space)

    def _tables(
        self, bins: int, height: int, width: int, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Per operation, its magnitudes (ops x bins, 0 where it has none) and signedness;
        made once per image size and device (a tensor built from a list on a GPU is a
        blocking copy: not one per batch)."""
        key = (bins, height, width, str(device), self.op_names)
        cache: dict[tuple[Any, ...], tuple[Tensor, Tensor]]
        cache = self.__dict__.setdefault("_table_cache", {})
        if key not in cache:
            rows: list[Tensor] = []
            signed: list[bool] = []
            for make, is_signed in self.space.values():
                values = make(bins, height, width)
                rows.append(torch.zeros(bins) if values is None else values.to(torch.float32))
                signed.append(is_signed)
            cache[key] = (torch.stack(rows).to(device), torch.tensor(signed, device=device))
        return cache[key]

    def _signs(
        self,
        ops: Tensor,
        signed: Tensor,
        device: torch.device,
        generator: torch.Generator | None,
    ) -> Tensor:
        """-1 where a signed operation's coin (torchvision: ``rand() <= 0.5``) says so."""
        coins = self._rand(ops.shape[0], *ops.shape[1:], device=device, generator=generator)
        negative = signed[ops.clamp(min=0)] & (coins <= 0.5)
        return 1.0 - 2.0 * negative.to(torch.float32)

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        return self._apply_steps(images, params["ops"], params["magnitudes"])

    def _apply_steps(self, images: Tensor, ops: Tensor, magnitudes: Tensor) -> Tensor:
        """Step by step, each sample's op (N, steps; -1: none) at its magnitude."""
        out = images
        for step in range(ops.shape[1]):

            def transform(chosen: Tensor, index: int, rows: Tensor, step: int = step) -> Tensor:
                return apply_op(
                    chosen, self.op_names[index], magnitudes[rows, step], self.interpolation,
                    self.fill,
                )  # fmt: skip

            out = apply_each_drawn(out, ops[:, step], transform, owned=out is not images)
        return out


class RandAugment(Policy):
    """RandAugment: ``num_ops`` random operations per sample, at one magnitude.

    Each operation is drawn uniformly from torchvision's 14, at bin ``magnitude`` of
    ``num_magnitude_bins``, signed at random where the operation is. ``fill`` on the
    image's own scale; None leaves 0.

    Args:
        num_ops: Operations applied to each image, one after the other.
        magnitude: The magnitude's bin, 0 to ``num_magnitude_bins - 1``.
        num_magnitude_bins: How many magnitudes each operation's range is split into.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``),
            for the geometric operations.
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel; None for 0.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A negative ``num_ops``, a ``num_magnitude_bins`` below 1, a
            ``magnitude`` outside [0, ``num_magnitude_bins - 1``], an ``interpolation``
            other than nearest or bilinear, or a ``fill`` that is not finite.
        TypeError: On a call, masks, boxes or keypoints beside the images (the policies
            do not move them).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        >>> augment = RandAugment(num_ops=2, magnitude=9)
        >>> params = augment.sample_params(images.shape, images.device)
        >>> [[augment.op_names[i] for i in ops] for ops in params["ops"].tolist()]
        [['TranslateY', 'Sharpness'], ['Posterize', 'Brightness']]
        >>> augment(images, params=params).dtype  # the draw, replayed
        torch.uint8
    """

    space = v2.RandAugment._AUGMENTATION_SPACE

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        fill: Fill = None,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(interpolation, fill, same_on_batch=same_on_batch, generator=generator)
        self.num_ops = check_int(num_ops, "num_ops", low=0)
        self.num_magnitude_bins = check_int(num_magnitude_bins, "num_magnitude_bins", low=1)
        self.magnitude = check_int(magnitude, "magnitude", low=0, high=num_magnitude_bins - 1)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        table, signed = self._tables(self.num_magnitude_bins, shape[-2], shape[-1], device)
        ops = self._integers(n, len(table), self.num_ops, device=device, generator=generator)
        signs = self._signs(ops, signed, device, generator)
        return {"ops": ops, "magnitudes": table[ops, self.magnitude] * signs}


class TrivialAugmentWide(Policy):
    """TrivialAugment Wide: one random operation per sample, at a random magnitude.

    The operation is one of torchvision's 14, at a bin drawn uniformly from
    ``num_magnitude_bins``, signed at random where the operation is.

    Args:
        num_magnitude_bins: How many magnitudes each operation's range is split into.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``),
            for the geometric operations.
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel; None for 0.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``num_magnitude_bins`` below 1, an ``interpolation`` other than
            nearest or bilinear, or a ``fill`` that is not finite.
        TypeError: On a call, masks, boxes or keypoints beside the images (the policies
            do not move them).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        >>> augment = TrivialAugmentWide()
        >>> params = augment.sample_params(images.shape, images.device)
        >>> [augment.op_names[i] for i, in params["ops"].tolist()]
        ['TranslateY', 'Sharpness']
        >>> augment(images, params=params).shape
        torch.Size([2, 3, 16, 16])
    """

    space = v2.TrivialAugmentWide._AUGMENTATION_SPACE

    def __init__(
        self,
        num_magnitude_bins: int = 31,
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        fill: Fill = None,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(interpolation, fill, same_on_batch=same_on_batch, generator=generator)
        self.num_magnitude_bins = check_int(num_magnitude_bins, "num_magnitude_bins", low=1)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        table, signed = self._tables(self.num_magnitude_bins, shape[-2], shape[-1], device)
        ops = self._integers(n, len(table), 1, device=device, generator=generator)
        bins = self._integers(n, self.num_magnitude_bins, 1, device=device, generator=generator)
        signs = self._signs(ops, signed, device, generator)
        return {"ops": ops, "magnitudes": table[ops, bins] * signs}


class AutoAugment(Policy):
    """AutoAugment with torchvision's learned policies, a sub-policy drawn per sample.

    The policies are ``AutoAugmentPolicy.IMAGENET``, ``CIFAR10`` and ``SVHN``: each
    sample draws one of the 25 sub-policies, whose two operations each apply with their
    own probability at their fixed magnitude bin.

    Args:
        policy: The ``AutoAugmentPolicy`` (torchvision's enum, also
            ``fastload.gpu.AutoAugmentPolicy``).
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``),
            for the geometric operations.
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel; None for 0.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``policy`` that is not an ``AutoAugmentPolicy`` (its name as a
            string included), an ``interpolation`` other than nearest or bilinear, or a
            ``fill`` that is not finite.
        TypeError: On a call, masks, boxes or keypoints beside the images (the policies
            do not move them).

    Example:
        >>> _ = torch.manual_seed(4)
        >>> images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        >>> augment = AutoAugment(AutoAugmentPolicy.CIFAR10)
        >>> params = augment.sample_params(images.shape, images.device)
        >>> params["ops"].tolist()  # two per sample; -1: skipped by its probability
        [[4, 2], [5, -1]]
        >>> [augment.op_names[i] for i in (4, 2, 5)]
        ['Rotate', 'TranslateX', 'Brightness']
        >>> augment(images, params=params).shape
        torch.Size([2, 3, 16, 16])
    """

    space = v2.AutoAugment._AUGMENTATION_SPACE

    def __init__(
        self,
        policy: AutoAugmentPolicy = AutoAugmentPolicy.IMAGENET,
        interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
        fill: Fill = None,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(interpolation, fill, same_on_batch=same_on_batch, generator=generator)
        if not isinstance(policy, AutoAugmentPolicy):
            raise ValueError(f"policy must be an AutoAugmentPolicy, got {policy!r}")
        self.policy = policy
        sub_policies = v2.AutoAugment(policy)._policies
        index = {name: i for i, name in enumerate(self.op_names)}
        # (policies, 2) operation indices, probabilities and magnitude bins
        self._sub_ops = torch.tensor([[index[op] for op, _, _ in sub] for sub in sub_policies])
        self._sub_p = torch.tensor([[p for _, p, _ in sub] for sub in sub_policies])
        self._sub_bins = torch.tensor(
            [[0 if b is None else b for _, _, b in sub] for sub in sub_policies]
        )

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        table, signed = self._tables(10, shape[-2], shape[-1], device)
        sub_ops, sub_p, sub_bins = self._sub_policies_on(device)
        chosen = self._integers(n, len(sub_ops), device=device, generator=generator)
        ops, bins = sub_ops[chosen], sub_bins[chosen]
        coins = self._rand(n, 2, device=device, generator=generator)
        applied = coins <= sub_p[chosen]
        magnitudes = table[ops, bins] * self._signs(ops, signed, device, generator)
        return {"policy": chosen, "ops": torch.where(applied, ops, -1), "magnitudes": magnitudes}

    def _sub_policies_on(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """The sub-policy tables on ``device``, copied there once, not once a batch."""
        cache: dict[str, tuple[Tensor, Tensor, Tensor]]
        cache = self.__dict__.setdefault("_sub_cache", {})
        if str(device) not in cache:
            ops, p, bins = (t.to(device) for t in (self._sub_ops, self._sub_p, self._sub_bins))
            cache[str(device)] = (ops, p, bins)
        return cache[str(device)]
