"""timm's ``auto_augment`` strings read into fastload batch modules.

``rand-m9-mstd0.5-inc1`` (RandAugment, with timm's operation sets ``t3a``/``t3aw``/
``tweights``), ``original``/``originalr``/``v0``/``v0r`` (AutoAugment, optionally
``-mstd0.5``), ``3a`` (DeiT-III's 3-augment: one of solarize, desaturate, blur per
image) and ``augmix-m5-w4-d2`` (AugMix). The sections
and their defaults are timm's; a section timm does not know, or a value that is not a
number, is a ``ValueError`` naming it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from torch import nn

from fastload.gpu.augmix import AugMix
from fastload.integrations.timm.policies import TimmAutoAugment, TimmRandAugment

__all__ = ["RAND_OPERATIONS", "augment_from_string", "sections"]

#: RandAugment's operations, as timm lists them; ``inc1`` swaps in the ones whose
#: severity increases with the level.
RAND_OPERATIONS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
    "TranslateYRel",
)  # fmt: skip
INCREASING = ("Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness")
AUTO_POLICIES = ("original", "originalr", "v0", "v0r", "3a")


def sections(config: str, allowed: dict[str, type]) -> dict[str, Any]:
    """The ``key<number>`` sections after the first, typed by ``allowed``.

    Example:
        >>> sections("rand-m9-mstd0.5", {"m": int, "mstd": float})
        {'m': 9, 'mstd': 0.5}
    """
    found: dict[str, Any] = {}
    for part in config.split("-")[1:]:
        match = re.fullmatch(r"([a-z]+)(.*)", part)
        if match is None or match.group(1) not in allowed:
            raise ValueError(
                f"auto_augment {config!r}: unknown section {part!r} (known: {sorted(allowed)})"
            )
        key = match.group(1)
        try:
            found[key] = allowed[key](match.group(2))
        except ValueError:
            raise ValueError(
                f"auto_augment {config!r}: section {part!r} needs a number "
                f"({allowed[key].__name__}) after its name"
            ) from None
    return found


def _timm_augment() -> ModuleType:
    try:
        return importlib.import_module("timm.data.auto_augment")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "this auto_augment string reads timm's own tables: pip install '.[timm]'"
        ) from None


def augment_from_string(
    config: str,
    *,
    image_size: int,
    mean: Sequence[float],
    interpolation: str = "bilinear",
) -> nn.Module:
    """The fastload module for timm's ``auto_augment`` string, on uint8 batches.

    Args:
        config: timm's string, e.g. ``"rand-m9-mstd0.5-inc1"``.
        image_size: The output's shorter side (translations are relative to it).
        mean: The normalisation mean, on 0..1: the fill of geometric operations.
        interpolation: timm's interpolation name; ``"nearest"`` stays nearest, every
            other (bicubic, random, ...) samples bilinearly on the device.

    Raises:
        ValueError: An unknown policy or section, or a value that is not a number.
        NotImplementedError: ``augmix`` with ``b1`` or ``mstd``.

    Example:
        >>> augment = augment_from_string("rand-m9-n3-mstd0.5", image_size=224, mean=[0.5] * 3)
        >>> augment.magnitude, augment.num_layers, augment.magnitude_std
        (9.0, 3, 0.5)
    """
    if not isinstance(config, str) or not config:
        raise ValueError(f"auto_augment must be a non-empty string, got {config!r}")
    name = config.split("-")[0]
    shared: dict[str, Any] = {
        "fill": [min(255, round(255 * m)) for m in mean],
        "interpolation": "nearest" if interpolation == "nearest" else "bilinear",
    }
    if name == "rand":
        return _rand_augment(config, image_size, shared)
    if name == "augmix":
        return _augmix(config, shared)
    if name in AUTO_POLICIES:
        found = sections(config, {"mstd": float})
        hparams = {"translate_const": int(image_size * 0.45)}
        policy = _timm_augment().auto_augment_policy(name, hparams=hparams)
        sub_policies = [[(op.name, op.prob, op.magnitude) for op in sub] for sub in policy]
        return TimmAutoAugment(
            sub_policies, magnitude_std=found.get("mstd", 0.0),
            translate_const=hparams["translate_const"], **shared,
        )  # fmt: skip
    raise ValueError(
        f"auto_augment {config!r} is not a timm policy: rand-..., augmix-..., or one of "
        f"{AUTO_POLICIES}"
    )


def _transform_set(config: str, choice: str, increasing: bool) -> tuple[list[str], Any]:
    """timm's named operation set (``t<name>``): names, and weights or None."""
    chosen = _timm_augment().rand_augment_choices(choice, increasing=increasing)
    if isinstance(chosen, dict):
        return list(chosen), list(chosen.values())
    return list(chosen), None


def _rand_augment(config: str, image_size: int, shared: dict[str, Any]) -> nn.Module:
    parts = config.split("-")
    choice = next((part[1:] for part in parts[1:] if part.startswith("t")), None)
    numeric = "-".join(part for part in parts if not part.startswith("t"))
    found = sections(
        numeric, {"m": int, "n": int, "p": float, "mstd": float, "mmax": int, "inc": int}
    )
    mstd = found.get("mstd", 0.0)
    increasing = bool(found.get("inc", 0))
    if choice is not None:
        names, weights = _transform_set(config, choice, increasing)
    else:
        names = [f"{op}Increasing" if increasing and op in INCREASING else op
                 for op in RAND_OPERATIONS]  # fmt: skip
        weights = None
    return TimmRandAugment(
        names,
        magnitude=found.get("m", 10),
        num_layers=found.get("n", 2),
        prob=found.get("p", 0.5),
        magnitude_std=float("inf") if mstd > 100 else mstd,  # timm: above 100, uniform
        magnitude_max=found.get("mmax"),
        weights=weights,
        translate_const=int(image_size * 0.45),
        **shared,
    )


def _augmix(config: str, shared: dict[str, Any]) -> nn.Module:
    found = sections(config, {"m": int, "w": int, "d": int, "a": float, "b": int, "mstd": float})
    if found.get("b"):
        raise NotImplementedError(f"auto_augment {config!r}: AugMix's blended mode (b1)")
    if "mstd" in found:
        raise NotImplementedError(
            f"auto_augment {config!r}: AugMix draws levels uniformly below m; mstd is not supported"
        )
    return AugMix(
        severity=found.get("m", 3),
        mixture_width=found.get("w", 3),
        chain_depth=found.get("d", -1),
        alpha=found.get("a", 1.0),
        interpolation=shared["interpolation"],
        fill=shared["fill"],
    )
