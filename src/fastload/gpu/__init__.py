"""Batch augmentation on the GPU (and the CPU): ``nn.Module``s with per-sample parameters.

Compose them in an ``nn.Sequential`` and pass it to ``DataPrefetcher(transform=...)``.
Arguments follow ``torchvision.transforms.v2``; each sample draws its own parameters
unless ``same_on_batch=True``. The kernels the modules call are in
:mod:`fastload.gpu.functional`.

The modules load on first use of a name, so that importing one submodule does not load
them all. (GPU decoding is :class:`fastload.decode.GPUDecoder`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload._lazy import lazy_exports

#: Public name -> module that defines it.
_EXPORTS = {
    "RandomAffine": "fastload.gpu.affine",
    "RandomRotation": "fastload.gpu.affine",
    "BatchTransform": "fastload.gpu.base",
    "GaussianBlur": "fastload.gpu.blur",
    "ColorJitter": "fastload.gpu.color",
    "Normalize": "fastload.gpu.color",
    "RandomGrayscale": "fastload.gpu.color",
    "ToDtype": "fastload.gpu.color",
    "RandomErasing": "fastload.gpu.erase",
    "BatchRandomResizedCrop": "fastload.gpu.geometric",  # RandomResizedCrop's own name
    "CenterCrop": "fastload.gpu.geometric",
    "RandomCrop": "fastload.gpu.geometric",
    "RandomHorizontalFlip": "fastload.gpu.geometric",
    "RandomResizedCrop": "fastload.gpu.geometric",
    "RandomVerticalFlip": "fastload.gpu.geometric",
    "Resize": "fastload.gpu.geometric",
    "sample_seeds": "fastload.seeds",
    "CutMix": "fastload.gpu.mix",
    "MixUp": "fastload.gpu.mix",
    "GaussianNoise": "fastload.gpu.pixel",
    "RandomAdjustSharpness": "fastload.gpu.pixel",
    "RandomAutocontrast": "fastload.gpu.pixel",
    "RandomEqualize": "fastload.gpu.pixel",
    "RandomInvert": "fastload.gpu.pixel",
    "RandomPosterize": "fastload.gpu.pixel",
    "RandomSolarize": "fastload.gpu.pixel",
    "AugMix": "fastload.gpu.augmix",
    "AutoAugment": "fastload.gpu.policies",
    "AutoAugmentPolicy": "fastload.gpu.policies",
    "RandAugment": "fastload.gpu.policies",
    "TrivialAugmentWide": "fastload.gpu.policies",
    "SanitizeBoundingBoxes": "fastload.gpu.targets",
    "ElasticTransform": "fastload.gpu.warp",
    "RandomPerspective": "fastload.gpu.warp",
}


__all__ = [
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "BatchRandomResizedCrop",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "ElasticTransform",
    "GaussianBlur",
    "GaussianNoise",
    "MixUp",
    "Normalize",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomAutocontrast",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomPerspective",
    "RandomPosterize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "RandomVerticalFlip",
    "Resize",
    "SanitizeBoundingBoxes",
    "ToDtype",
    "TrivialAugmentWide",
    "sample_seeds",
]

if TYPE_CHECKING:
    from fastload.gpu.affine import RandomAffine, RandomRotation
    from fastload.gpu.augmix import AugMix
    from fastload.gpu.base import BatchTransform
    from fastload.gpu.blur import GaussianBlur
    from fastload.gpu.color import ColorJitter, Normalize, RandomGrayscale, ToDtype
    from fastload.gpu.erase import RandomErasing
    from fastload.gpu.geometric import BatchRandomResizedCrop as BatchRandomResizedCrop
    from fastload.gpu.geometric import (
        CenterCrop,
        RandomCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        RandomVerticalFlip,
        Resize,
    )
    from fastload.gpu.mix import CutMix, MixUp
    from fastload.gpu.pixel import (
        GaussianNoise,
        RandomAdjustSharpness,
        RandomAutocontrast,
        RandomEqualize,
        RandomInvert,
        RandomPosterize,
        RandomSolarize,
    )
    from fastload.gpu.policies import (
        AutoAugment,
        AutoAugmentPolicy,
        RandAugment,
        TrivialAugmentWide,
    )
    from fastload.gpu.targets import SanitizeBoundingBoxes
    from fastload.gpu.warp import ElasticTransform, RandomPerspective
    from fastload.seeds import sample_seeds


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
