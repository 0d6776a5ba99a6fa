"""timm's ``create_loader`` with fastload inside: change one import in timm's
``train.py`` (``from fastload.integrations.timm import create_loader``).

Importing this module does not import timm; timm's own tables are read only for
AutoAugment policies and named RandAugment operation sets.
"""

from __future__ import annotations

from fastload.integrations.timm.augment import augment_from_string
from fastload.integrations.timm.erasing import RandomErasing
from fastload.integrations.timm.loader import AugmentedCollate, PrefetchLoader, create_loader
from fastload.integrations.timm.mixup import Mixup
from fastload.integrations.timm.policies import TimmAutoAugment, TimmRandAugment
from fastload.integrations.timm.samplers import OrderedDistributedSampler, RepeatAugSampler

__all__ = [
    "AugmentedCollate",
    "Mixup",
    "OrderedDistributedSampler",
    "PrefetchLoader",
    "RandomErasing",
    "RepeatAugSampler",
    "TimmAutoAugment",
    "TimmRandAugment",
    "augment_from_string",
    "create_loader",
]
