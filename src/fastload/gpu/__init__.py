"""Batch augmentation on the GPU (and the CPU): ``nn.Module``s with per-sample parameters.

Compose them in an ``nn.Sequential`` and pass it to ``DataPrefetcher(transform=...)``.
Arguments follow ``torchvision.transforms.v2``; each sample draws its own parameters
unless ``same_on_batch=True``.
"""

from fastload.gpu.affine import RandomAffine, RandomRotation
from fastload.gpu.base import BatchTransform
from fastload.gpu.blur import GaussianBlur
from fastload.gpu.color import ColorJitter, Normalize, RandomGrayscale, ToDtype
from fastload.gpu.decode import GPUDecoder
from fastload.gpu.erase import RandomErasing
from fastload.gpu.geometric import (
    BatchRandomResizedCrop as BatchRandomResizedCrop,  # RandomResizedCrop's own name
)
from fastload.gpu.geometric import (
    CenterCrop,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
)
from fastload.gpu.keyed import sample_seeds
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
    AugMix,
    AutoAugment,
    AutoAugmentPolicy,
    RandAugment,
    TrivialAugmentWide,
)
from fastload.gpu.targets import SanitizeBoundingBoxes
from fastload.gpu.warp import ElasticTransform, RandomPerspective

__all__ = [
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "ElasticTransform",
    "GPUDecoder",
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
