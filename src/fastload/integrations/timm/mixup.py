"""timm's Mixup/CutMix on the device batch: per batch, per pair or per sample, with
label smoothing, switchable off by ``mixup_enabled`` as timm's train.py does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from fastload._checks import check_int, check_probability, finite, pair
from fastload.gpu.base import BatchTransform, Params, check_images
from fastload.gpu.functional import box_mask
from fastload.gpu.functional.dtype import back_to
from fastload.gpu.rows import run_length
from fastload.typed_torch import share_memory

__all__ = ["Mixup"]

MODES = ("batch", "pair", "elem")
#: The attributes of timm's Mixup and FastCollateMixup this module is made from.
TIMM_ATTRIBUTES = (
    "mixup_alpha", "cutmix_alpha", "cutmix_minmax", "mix_prob", "switch_prob", "mode",
    "correct_lam", "label_smoothing", "num_classes",
)  # fmt: skip


class Mixup(BatchTransform):
    """timm's ``Mixup`` for ``(images, labels)`` on the device: each image mixed with
    its mirror in the batch (image ``i`` with image ``N - 1 - i``), by MixUp or CutMix.

    ``mode="batch"`` draws one mix for the whole batch, ``"pair"`` one per mirrored pair,
    ``"elem"`` one per image. With probability ``prob`` a mix happens; CutMix is chosen
    with ``switch_prob`` when both alphas are positive. A CutMix box is drawn from
    ``lam`` (or, with ``cutmix_minmax``, its sides from that fraction range) and ``lam``
    becomes the area kept when ``correct_lam``. Labels become soft, smoothed targets
    ``(N, num_classes)``, also when ``mixup_enabled`` is False and nothing is mixed.

    Args:
        mixup_alpha: MixUp's Beta parameter; 0 turns MixUp off.
        cutmix_alpha: CutMix's Beta parameter; 0 turns CutMix off.
        cutmix_minmax: The CutMix box's sides as fractions ``(min, max)`` of the image's.
        prob: Probability of mixing a batch, pair or image.
        switch_prob: Probability of CutMix rather than MixUp, when both are on.
        mode: ``"batch"``, ``"pair"`` or ``"elem"``.
        correct_lam: Weigh the labels by the box's area after clipping at the border.
        label_smoothing: timm's smoothing: ``smoothing / num_classes`` off, the rest on.
        num_classes: How many classes the labels have.
        multi_label: Labels are dense (N, ``num_classes``) targets, smoothed toward 0.5.
        inplace: Mix the batch given (as timm does) rather than a copy, in timm's
            default ``mode="batch"``.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``mode`` not among the three, a negative alpha or both zero, a
            probability outside [0, 1], or a ``cutmix_minmax`` not in order; on a call,
            an odd batch, or not one label per image.

    Example:
        >>> mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10)
        >>> images, soft = mix(torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 3]))
        >>> soft.shape, bool(torch.allclose(soft.sum(dim=1), torch.ones(4)))
        (torch.Size([4, 10]), True)
    """

    targets = "pass"

    def __init__(
        self,
        mixup_alpha: float = 1.0,
        cutmix_alpha: float = 0.0,
        cutmix_minmax: Sequence[float] | None = None,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: str = "batch",
        correct_lam: bool = True,
        label_smoothing: float = 0.1,
        num_classes: int = 1000,
        multi_label: bool = False,
        *,
        inplace: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=prob, generator=generator)
        self.inplace = bool(inplace)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.cutmix_minmax = None if cutmix_minmax is None else pair(cutmix_minmax, "cutmix_minmax")
        if self.cutmix_minmax is not None:
            cutmix_alpha = 1.0  # timm: a min-max box means CutMix is on
            if not 0 <= self.cutmix_minmax[0] <= self.cutmix_minmax[1] <= 1:
                raise ValueError(f"cutmix_minmax must be (min, max) in [0, 1], got {cutmix_minmax}")
        self.mixup_alpha = finite(mixup_alpha, "mixup_alpha")
        self.cutmix_alpha = finite(cutmix_alpha, "cutmix_alpha")
        if (
            min(self.mixup_alpha, self.cutmix_alpha) < 0
            or self.mixup_alpha == self.cutmix_alpha == 0
        ):
            raise ValueError(
                "mixup_alpha and cutmix_alpha must be >= 0 and one of them > 0, got "
                f"{mixup_alpha!r} and {cutmix_alpha!r}"
            )
        self.switch_prob = check_probability(switch_prob, "switch_prob")
        self.mode = mode
        self.correct_lam = bool(correct_lam)
        self.label_smoothing = check_probability(label_smoothing, "label_smoothing")
        self.num_classes = check_int(num_classes, "num_classes", low=1)
        self.multi_label = bool(multi_label)
        # train.py turns it off for the last epochs: a flag in shared memory, so that a
        # copy mixing in a loader's (persistent) worker processes sees it turned off too
        self._enabled = share_memory(torch.ones((), dtype=torch.bool))

    @property
    def mixup_enabled(self) -> bool:
        return bool(self._enabled)

    @mixup_enabled.setter
    def mixup_enabled(self, enabled: bool) -> None:
        self._enabled.fill_(bool(enabled))

    @classmethod
    def from_timm(cls, mixup: Any, *, inplace: bool = False) -> Mixup:
        """The same mixing as a timm ``Mixup`` or ``FastCollateMixup`` (read from its
        attributes: timm is not imported)."""
        values = {name: getattr(mixup, name) for name in TIMM_ATTRIBUTES}
        values["prob"] = values.pop("mix_prob")
        made = cls(**values, multi_label=getattr(mixup, "multi_label", False), inplace=inplace)
        made.mixup_enabled = bool(getattr(mixup, "mixup_enabled", True))
        return made

    # (images, labels) in, (images, soft labels) out, as timm's Mixup.
    def forward(  # type: ignore[override]
        self, images: Tensor, labels: Tensor, params: Params | None = None
    ) -> tuple[Tensor, Tensor]:
        check_images(images, type(self).__name__)
        if len(images) % 2:
            raise ValueError(f"Mixup needs an even batch (timm's rule), got {len(images)} images")
        if not isinstance(labels, Tensor) or labels.shape[:1] != images.shape[:1]:
            raise ValueError(
                f"Mixup needs one label per image, got {getattr(labels, 'shape', None)}"
            )
        if params is None:
            params = self.sample_params(images.shape, images.device, self.generator)
        with torch.autocast(images.device.type, enabled=False):
            return self.apply_transform(images, params), self._soft(labels, params["lam"])

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, _, height, width = shape
        rows = {"batch": 1, "pair": n // 2, "elem": n}[self.mode]
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cut = self._rand(rows, device=device, generator=generator) < self.switch_prob
        else:
            cut = torch.full((rows,), self.cutmix_alpha > 0, device=device)
        lam = torch.ones(rows, device=device)
        for alpha, chosen in ((self.mixup_alpha, ~cut), (self.cutmix_alpha, cut)):
            if alpha > 0:
                lam = torch.where(chosen, self._beta(rows, alpha, device, generator), lam)
        mixes = self._rand(rows, device=device, generator=generator) < self.p
        lam = torch.where(mixes & self.mixup_enabled, lam, torch.ones_like(lam))
        cut = cut & (lam < 1)
        top, left, box_h, box_w = self._boxes(rows, lam, height, width, device, generator)
        box_h = torch.where(cut, box_h, torch.zeros_like(box_h))
        if self.correct_lam or self.cutmix_minmax is not None:
            lam = torch.where(cut, 1 - box_h * box_w / (height * width), lam)
        params = {"lam": lam, "cut": cut, "top": top, "left": left, "height": box_h, "width": box_w}
        if self.mode == "batch":
            return {key: value.expand(n) for key, value in params.items()}
        if self.mode == "pair":  # image N - 1 - i shares pair i's draw
            return {key: torch.cat([value, value.flip(0)]) for key, value in params.items()}
        return params

    def _boxes(
        self,
        rows: int,
        lam: Tensor,
        height: int,
        width: int,
        device: torch.device,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """timm's boxes: centred at a uniform pixel, sides ``sqrt(1 - lam)`` of the
        image's, clipped; or with ``cutmix_minmax``, sides in that range, inside."""
        draws = self._rand(rows, 4, device=device, generator=generator)
        if self.cutmix_minmax is not None:
            low, high = self.cutmix_minmax
            sides = []
            for column, size in ((0, height), (1, width)):
                least, most = int(size * low), int(size * high)
                sides.append(least + torch.floor(draws[:, column] * max(most - least, 1)))
            box_h, box_w = sides
            top = torch.floor(draws[:, 2] * (height - box_h + 1))
            left = torch.floor(draws[:, 3] * (width - box_w + 1))
            return top, left, box_h, box_w
        ratio = torch.sqrt(1 - lam)
        cut_h, cut_w = torch.floor(height * ratio), torch.floor(width * ratio)
        cy, cx = torch.floor(draws[:, 0] * height), torch.floor(draws[:, 1] * width)
        top = (cy - torch.floor(cut_h / 2)).clamp(0, height)
        bottom = (cy + torch.floor((cut_h + 1) / 2)).clamp(0, height)
        left = (cx - torch.floor(cut_w / 2)).clamp(0, width)
        right = (cx + torch.floor((cut_w + 1) / 2)).clamp(0, width)
        return top, left, bottom - top, right - left

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        if self.mode == "batch":
            return self._mix_whole_batch(images, params)
        partner = images.flip(0)
        maths = images.dtype if images.is_floating_point() else torch.float32
        lam = params["lam"].to(maths).view(-1, 1, 1, 1)
        blended = _to_dtype(images * lam + partner * (1 - lam), images.dtype)
        mixed = torch.where(params["cut"].view(-1, 1, 1, 1), images, blended)
        size = (images.shape[-2], images.shape[-1])
        box = box_mask(params["top"], params["left"], params["height"], params["width"], size)
        return torch.where(box, partner, mixed)

    def _mix_whole_batch(self, images: Tensor, params: Params) -> Tensor:
        """timm's default mode, one draw for the batch (row 0's): one blend, one box, or
        the batch untouched, each a single pass where the general path takes four."""
        lam, cut = float(params["lam"][0]), bool(params["cut"][0])
        if lam == 1:
            return images
        mixed = images if self.inplace else images.clone()
        if cut:
            top, left = int(params["top"][0]), int(params["left"][0])
            bottom, right = top + int(params["height"][0]), left + int(params["width"][0])
            box = mixed[..., top:bottom, left:right]
            box.copy_(box.flip(0))  # flip copies the box first: no row is read after its write
            return mixed
        return _blend_with_mirror(mixed, lam)

    def _soft(self, labels: Tensor, lam: Tensor) -> Tensor:
        smoothing = self.label_smoothing
        if self.multi_label:
            soft = labels.float() * (1 - smoothing) + 0.5 * smoothing
        else:
            off = smoothing / self.num_classes
            soft = torch.full(
                (len(labels), self.num_classes), off, device=labels.device, dtype=torch.float32
            )
            soft.scatter_(1, labels.long().view(-1, 1), 1 - smoothing + off)
        weight = lam.to(soft.dtype).view(-1, 1)
        return soft * weight + soft.flip(0) * (1 - weight)


def _blend_with_mirror(images: Tensor, lam: float) -> Tensor:
    """``images`` blended in place with their mirror (row ``i`` with row ``N - 1 - i``),
    ``lam`` of their own: pair after pair, in the images' dtype (integers rounded)."""
    n = len(images)
    maths = images.dtype if images.is_floating_point() else torch.float32
    step = run_length(images)  # pairs a pass: a few that stay in the CPU's cache
    for start in range(0, n // 2, step):
        stop = min(start + step, n // 2)
        # rows start..stop-1 and their mirrors, the rows n-stop..n-1-start reversed: slices
        # (indexing by a tensor of rows goes element by element on a CPU)
        first = images[start:stop].to(maths, copy=True)
        second = images[n - stop : n - start].flip(0).to(maths)
        mixed = first * lam
        mixed += second * (1 - lam)
        second *= lam
        second += first.mul_(1 - lam)  # the mirror's blend, in place: the same sums
        images[start:stop] = _to_dtype(mixed, images.dtype)
        images[n - stop : n - start] = _to_dtype(second, images.dtype).flip(0)
    return images


def _to_dtype(blended: Tensor, dtype: torch.dtype) -> Tensor:
    """The blend in the images' dtype: integers rounded to nearest, as timm's
    ``FastCollateMixup`` rounds its uint8 blend."""
    return blended.to(dtype) if dtype.is_floating_point else back_to(blended.round_(), dtype)
