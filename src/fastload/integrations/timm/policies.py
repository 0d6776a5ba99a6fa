"""timm's RandAugment and AutoAugment on the batch: timm's operation sets, level scales
and magnitude noise, each sample drawing its own operations.

An operation's level (0 to 10, timm's ``m``) becomes its argument as timm's
``auto_augment.py`` computes it, then runs as the matching torchvision operation
(:func:`fastload.gpu.policies.apply_op`); ``SolarizeAdd`` and the blurs of DeiT-III's
3-augment, which torchvision's policies lack, run here. Samples that drew the same
operation at a step are transformed together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from fastload._checks import check_int, check_probability
from fastload.gpu.base import BatchTransform, Params
from fastload.gpu.functional import Fill, gaussian_blur, max_value
from fastload.gpu.functional.lookup import per_pixel
from fastload.gpu.policies import apply_op
from fastload.gpu.rows import apply_each_drawn

__all__ = ["OPERATIONS", "TimmAutoAugment", "TimmRandAugment"]

#: (level (N,), width, height, translate_const, translate_pct) -> the argument
Argument = Callable[[Tensor, int, int, float, float], Tensor]


def _enhance(level: Tensor, *_: float) -> Tensor:
    return level * 0.18 - 0.9  # a factor in [0.1, 1.9], as 1 + magnitude


def _enhance_increasing(level: Tensor, *_: float) -> Tensor:
    return level * 0.09  # signed later, then kept >= -0.9 (a factor >= 0.1)


def _solarize(level: Tensor, *_: float) -> Tensor:
    return torch.floor(level * 25.6).clamp(max=256)  # threshold on 0..255


def _desaturate(level: Tensor, *_: float) -> Tensor:
    return -(0.5 + level * 0.05).clamp(0.5, 1.0)  # a colour factor in [0, 0.5], as 1 + this


def _blur_radius(level: Tensor, *_: float) -> Tensor:
    return (0.1 + level * 0.19).clamp(0.1, 2.0)  # PIL's radius, the Gaussian's sigma


def _blur_scale(level: Tensor, *_: float) -> Tensor:
    return (level / 10).clamp(0.0, 1.0)  # the top of the radius range, as a fraction of 2


#: timm's name -> (the operation that runs it, its argument from the level, signed)
OPERATIONS: dict[str, tuple[str, Argument | None, bool]] = {
    "AutoContrast": ("AutoContrast", None, False),
    "Equalize": ("Equalize", None, False),
    "Invert": ("Invert", None, False),
    "Rotate": ("Rotate", lambda level, *_: level * 3.0, True),
    "Posterize": ("Posterize", lambda level, *_: torch.floor(level * 0.4), False),
    "PosterizeIncreasing": ("Posterize", lambda level, *_: 4 - torch.floor(level * 0.4), False),
    "PosterizeOriginal": ("Posterize", lambda level, *_: torch.floor(level * 0.4) + 4, False),
    "Solarize": ("Solarize", _solarize, False),
    "SolarizeIncreasing": ("Solarize", lambda level, *_: 256 - _solarize(level), False),
    "SolarizeAdd": ("SolarizeAdd", lambda level, *_: torch.floor(level * 11).clamp(max=128), False),
    "Color": ("Color", _enhance, False),
    "ColorIncreasing": ("Color", _enhance_increasing, True),
    "Contrast": ("Contrast", _enhance, False),
    "ContrastIncreasing": ("Contrast", _enhance_increasing, True),
    "Brightness": ("Brightness", _enhance, False),
    "BrightnessIncreasing": ("Brightness", _enhance_increasing, True),
    "Sharpness": ("Sharpness", _enhance, False),
    "SharpnessIncreasing": ("Sharpness", _enhance_increasing, True),
    "ShearX": ("ShearX", lambda level, *_: level * 0.03, True),
    "ShearY": ("ShearY", lambda level, *_: level * 0.03, True),
    "TranslateX": ("TranslateX", lambda level, w, h, const, pct: level / 10 * const, True),
    "TranslateY": ("TranslateY", lambda level, w, h, const, pct: level / 10 * const, True),
    "TranslateXRel": ("TranslateX", lambda level, w, h, const, pct: level / 10 * pct * w, True),
    "TranslateYRel": ("TranslateY", lambda level, w, h, const, pct: level / 10 * pct * h, True),
    # DeiT-III's 3-augment ("3a") and its RandAugment sets ("t3a", "t3aw")
    "Desaturate": ("Color", _desaturate, False),
    "GaussianBlur": ("GaussianBlur", _blur_radius, False),
    "GaussianBlurRand": ("GaussianBlur", _blur_scale, False),
}
#: the largest blur radius: timm's radius_max and GaussianBlur's top level
_MAX_RADIUS = 2.0


def check_operations(names: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted(set(names) - set(OPERATIONS))
    if unknown:
        raise NotImplementedError(
            f"timm operations {unknown} have no fastload counterpart; supported: "
            f"{sorted(OPERATIONS)}"
        )
    return tuple(names)


class _TimmOps(BatchTransform):
    """Draw ``ops`` (N, steps; -1: skipped) and ``levels``; apply them step by step."""

    targets = "refuse"

    def __init__(
        self,
        op_names: Sequence[str],
        *,
        magnitude_std: float,
        magnitude_max: float | None,
        translate_const: float,
        translate_pct: float,
        fill: Fill,
        interpolation: str,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__(generator=generator)
        self.op_names = check_operations(op_names)
        if magnitude_std < 0:
            raise ValueError(f"magnitude_std must be >= 0, got {magnitude_std!r}")
        self.magnitude_std = float(magnitude_std)
        self.magnitude_max = magnitude_max
        self.translate_const, self.translate_pct = float(translate_const), float(translate_pct)
        self.fill = fill
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(
                f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}"
            )
        self.interpolation = interpolation

    def _levels(
        self, magnitudes: Tensor, device: torch.device, generator: torch.Generator | None
    ) -> Tensor:
        """timm's magnitude noise: uniform in [0, m] for an infinite std, else normal
        around m; clipped to [0, mmax or 10]."""
        n, steps = magnitudes.shape
        if self.magnitude_std == float("inf"):
            draws = self._rand(n, steps, device=device, generator=generator)
            magnitudes = draws * magnitudes
        elif self.magnitude_std > 0:
            noise = self._normal(n, steps, device=device, generator=generator)
            magnitudes = magnitudes + self.magnitude_std * noise
        return magnitudes.clamp(0, self.magnitude_max or 10.0)

    def _signs(
        self, shape: tuple[int, int], device: torch.device, generator: torch.Generator | None
    ) -> Tensor:
        coins = self._rand(*shape, device=device, generator=generator)
        return torch.where(coins > 0.5, -1.0, 1.0)  # timm negates when random() > 0.5

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        height, width = images.shape[-2:]
        out = images
        for step in range(params["ops"].shape[1]):

            def transform(chosen: Tensor, index: int, rows: Tensor, step: int = step) -> Tensor:
                name = self.op_names[index]
                op, argument, signed = OPERATIONS[name]
                magnitude = torch.zeros(len(rows), device=images.device)
                if argument is not None:
                    magnitude = argument(
                        params["levels"][rows, step], width, height,
                        self.translate_const, self.translate_pct,
                    )  # fmt: skip
                if signed:
                    magnitude = magnitude * params["signs"][rows, step]
                if name == "GaussianBlurRand":  # timm: a radius uniform in [0.1, 2 * level]
                    radius_max = _MAX_RADIUS * magnitude
                    magnitude = 0.1 + params["radii"][rows, step] * (radius_max - 0.1)
                return self._run(chosen, name, op, magnitude)

            out = apply_each_drawn(out, params["ops"][:, step], transform, owned=out is not images)
        return out

    def _with_radii(
        self, params: Params, device: torch.device, generator: torch.Generator | None
    ) -> Params:
        """``radii`` (N, steps), the draws of ``GaussianBlurRand``, only where it can run
        (the other policies' streams stay as they were)."""
        if "GaussianBlurRand" in self.op_names:
            params["radii"] = self._rand(*params["ops"].shape, device=device, generator=generator)
        return params

    def _run(self, images: Tensor, name: str, op: str, magnitude: Tensor) -> Tensor:
        if op == "GaussianBlur":  # PIL's radius is the sigma; the kernel covers 3 sigmas
            height, width = images.shape[-2:]
            half = min(math.ceil(3 * _MAX_RADIUS), height - 1, width - 1)
            sigma = magnitude.clamp(min=1e-3)  # a radius of 0 leaves the image as it is
            return gaussian_blur(images, sigma, (2 * half + 1, 2 * half + 1))
        if op == "SolarizeAdd":
            return solarize_add(images, magnitude)
        if op == "Solarize":
            magnitude = magnitude / 255  # apply_op takes the threshold as a fraction
        elif name.startswith(("Color", "Contrast", "Brightness", "Sharpness")) and name.endswith(
            "Increasing"
        ):
            magnitude = magnitude.clamp(min=-0.9)  # timm keeps the factor >= 0.1
        return apply_op(images, op, magnitude, self.interpolation, self.fill)


@per_pixel
def solarize_add(images: Tensor, amount: Tensor) -> Tensor:
    """timm's ``SolarizeAdd``: values below the middle brightened by each sample's
    ``amount`` (N,) on the 0..255 scale."""
    top = max_value(images.dtype)
    added = (images.float() + amount.view(-1, 1, 1, 1) * top / 255).clamp(max=top)
    return torch.where(images < 128 * top / 255, added.to(images.dtype), images)


class TimmRandAugment(_TimmOps):
    """timm's RandAugment: ``num_layers`` operations per sample, each applied with
    probability ``prob`` at level ``magnitude`` (with noise of ``magnitude_std``).

    Operations are drawn with replacement, or without it by ``weights`` (timm's
    weighted choice).

    Example:
        >>> augment = TimmRandAugment(["Rotate", "Invert"], magnitude=9, num_layers=2)
        >>> params = augment.sample_params(torch.Size([4, 3, 16, 16]), torch.device("cpu"))
        >>> params["ops"].shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        op_names: Sequence[str],
        *,
        magnitude: float = 10,
        num_layers: int = 2,
        prob: float = 0.5,
        magnitude_std: float = 0.0,
        magnitude_max: float | None = None,
        weights: Sequence[float] | None = None,
        translate_const: float = 100,
        translate_pct: float = 0.45,
        fill: Fill = None,
        interpolation: str = "bilinear",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            op_names, magnitude_std=magnitude_std, magnitude_max=magnitude_max,
            translate_const=translate_const, translate_pct=translate_pct, fill=fill,
            interpolation=interpolation, generator=generator,
        )  # fmt: skip
        self.magnitude = float(magnitude)
        self.num_layers = check_int(num_layers, "num_layers", low=0)
        self.prob = check_probability(prob, "prob")
        if weights is not None and (len(weights) != len(self.op_names) or min(weights) < 0):
            raise ValueError(f"weights must be one >= 0 per operation, got {weights!r}")
        if weights is not None and self.num_layers > sum(w > 0 for w in weights):
            raise ValueError(f"num_layers={num_layers} is more than the weighted operations")
        self.weights = None if weights is None else tuple(float(w) for w in weights)

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, steps, count = shape[0], self.num_layers, len(self.op_names)
        if self.weights is None:
            ops = self._integers(n, count, steps, device=device, generator=generator)
        else:  # without replacement: the top keys of log(w) + Gumbel noise
            draws = self._rand(n, count, device=device, generator=generator).clamp(min=1e-12)
            keys = torch.log(torch.tensor(self.weights, device=device)) - torch.log(
                -torch.log(draws)
            )
            ops = keys.topk(steps, dim=1).indices
        applied = self._rand(n, steps, device=device, generator=generator) < self.prob
        levels = self._levels(
            torch.full((n, steps), self.magnitude, device=device), device, generator
        )
        params = {
            "ops": torch.where(applied, ops, -1),
            "levels": levels,
            "signs": self._signs((n, steps), device, generator),
        }
        return self._with_radii(params, device, generator)


class TimmAutoAugment(_TimmOps):
    """timm's AutoAugment: each sample draws one sub-policy, whose operations apply
    each with its own probability at its own level.

    Args:
        sub_policies: Each a sequence of ``(operation, probability, level)``.

    Example:
        >>> augment = TimmAutoAugment([[("Invert", 1.0, 0)], [("Rotate", 0.5, 9)]])
        >>> params = augment.sample_params(torch.Size([4, 3, 16, 16]), torch.device("cpu"))
        >>> params["ops"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        sub_policies: Sequence[Sequence[tuple[str, float, float]]],
        *,
        magnitude_std: float = 0.0,
        translate_const: float = 100,
        translate_pct: float = 0.45,
        fill: Fill = None,
        interpolation: str = "bilinear",
        generator: torch.Generator | None = None,
    ) -> None:
        names = sorted({op for sub in sub_policies for op, _, _ in sub})
        super().__init__(
            names, magnitude_std=magnitude_std, magnitude_max=None,
            translate_const=translate_const, translate_pct=translate_pct, fill=fill,
            interpolation=interpolation, generator=generator,
        )  # fmt: skip
        if not sub_policies or not all(sub_policies):
            raise ValueError("sub_policies must hold at least one non-empty sub-policy")
        steps = max(len(sub) for sub in sub_policies)
        index = {name: i for i, name in enumerate(self.op_names)}
        pad = [("", 0.0, 0.0)] * steps
        rows = [list(sub) + pad[len(sub) :] for sub in sub_policies]
        self.sub_policies = [list(sub) for sub in sub_policies]
        self._ops = torch.tensor([[index.get(op, -1) for op, _, _ in row] for row in rows])
        self._probs = torch.tensor([[p for _, p, _ in row] for row in rows])
        self._magnitudes = torch.tensor([[float(m) for _, _, m in row] for row in rows])

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        chosen = self._integers(n, len(self._ops), device=device, generator=generator)
        tables = self.__dict__.setdefault("_on_device", {})
        if str(device) not in tables:  # copied once per device, not once per batch
            tables[str(device)] = tuple(
                t.to(device) for t in (self._ops, self._probs, self._magnitudes)
            )
        table_ops, table_probs, table_magnitudes = tables[str(device)]
        ops, probs = table_ops[chosen], table_probs[chosen]
        steps = ops.shape[1]
        applied = self._rand(n, steps, device=device, generator=generator) < probs
        levels = self._levels(table_magnitudes[chosen], device, generator)
        params = {
            "policy": chosen,
            "ops": torch.where(applied, ops, -1),
            "levels": levels,
            "signs": self._signs((n, steps), device, generator),
        }
        return self._with_radii(params, device, generator)
