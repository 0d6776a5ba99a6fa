"""What the fastload.gpu tests share: test images, the modules every contract test
runs, and the parity check against torchvision (tests/gpu/).

Tolerances: float32 images match torchvision to 1e-5, except RandomResizedCrop
(roi_align's averaging vs torchvision's triangle antialias filter: mean 3e-3, max 0.08).
uint8 images match to 1 level, except ColorJitter (all four operations: 8 levels, mean
2; over 80 seeds the worst was 6 and 1.7), because torchvision truncates to uint8 after
every operation while we round once at the end.
"""

from __future__ import annotations

import torch
from torch import nn

from fastload import gpu


def images(n=6, height=40, width=56, dtype=torch.uint8, device="cpu", seed=0) -> torch.Tensor:
    """Smooth random images: a coarse grid upsampled, like photographs, not noise."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 5, 7, generator=generator)
    smooth = nn.functional.interpolate(coarse, size=(height, width), mode="bicubic").clamp(0, 1)
    out = (smooth * 255).round().to(torch.uint8) if dtype == torch.uint8 else smooth.to(dtype)
    return out.to(device)


MODULES = {
    "RandomResizedCrop": lambda: gpu.RandomResizedCrop(24),
    "RandomCrop": lambda: gpu.RandomCrop(24, padding=4),
    "CenterCrop": lambda: gpu.CenterCrop(24),
    "Resize": lambda: gpu.Resize((24, 30)),
    "RandomHorizontalFlip": lambda: gpu.RandomHorizontalFlip(),
    "RandomVerticalFlip": lambda: gpu.RandomVerticalFlip(),
    "ColorJitter": lambda: gpu.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "RandomGrayscale": lambda: gpu.RandomGrayscale(p=0.5),
    "GaussianBlur": lambda: gpu.GaussianBlur(5, sigma=(1.0, 2.0)),  # 0.1 would be the identity
    "RandomErasing": lambda: gpu.RandomErasing(p=0.9),
    "RandomInvert": lambda: gpu.RandomInvert(),
    "RandomPosterize": lambda: gpu.RandomPosterize(bits=3),
    "RandomSolarize": lambda: gpu.RandomSolarize(threshold=0.5),
    "RandomAdjustSharpness": lambda: gpu.RandomAdjustSharpness(sharpness_factor=3.0),
    "RandomAutocontrast": lambda: gpu.RandomAutocontrast(),
    "RandomEqualize": lambda: gpu.RandomEqualize(),
    "GaussianNoise": lambda: gpu.GaussianNoise(sigma=0.2),
    "RandomAffine": lambda: gpu.RandomAffine(30, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5)),
    "RandomRotation": lambda: gpu.RandomRotation(45, interpolation="bilinear"),
    "RandAugment": lambda: gpu.RandAugment(),
    "TrivialAugmentWide": lambda: gpu.TrivialAugmentWide(),
    "AutoAugment": lambda: gpu.AutoAugment(),
    "AugMix": lambda: gpu.AugMix(),
    "RandomPerspective": lambda: gpu.RandomPerspective(p=0.5),
    "ElasticTransform": lambda: gpu.ElasticTransform(alpha=30.0, sigma=3.0),
}


FLOAT_ONLY = {"Normalize": lambda: gpu.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))}


PROBABILISTIC = [
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomErasing",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
    "RandomAdjustSharpness",
    "RandomEqualize",
    "RandomPerspective",
]  # RandomAutocontrast leaves full-range images as they are: tests/gpu/test_pixel.py


#: Public modules that the image contract above cannot take, each with its own tests.
OUTSIDE_THE_CONTRACT = {
    "BatchTransform": "the base class",
    "MixUp": "takes (images, labels): the mixing tests below",
    "CutMix": "takes (images, labels): the mixing tests below",
    "AutoAugmentPolicy": "torchvision's enum of AutoAugment's policies, not a module",
    "SanitizeBoundingBoxes": "takes (images, targets): tests/gpu/test_targets.py",
    "ToDtype": "changes the dtype: its parity test below",
    "sample_seeds": "a context manager for the draws: tests/gpu/test_keyed.py",
    "BatchRandomResizedCrop": "RandomResizedCrop itself, under the name that says it is",
}


OUTPUT_SHAPE = {
    "RandomResizedCrop": (24, 24),
    "RandomCrop": (24, 24),
    "CenterCrop": (24, 24),
    "Resize": (24, 30),
}


FLOAT_TOL = {"rtol": 0, "atol": 1e-5}


def assert_parity(ours, reference, dtype, *, uint8_max=1, uint8_mean=0.75):
    if dtype == torch.uint8:
        difference = (ours.int() - reference.int()).abs()
        assert difference.max() <= uint8_max and difference.float().mean() <= uint8_mean
    else:
        torch.testing.assert_close(ours, reference, **FLOAT_TOL)


def per_image(batch, fn):
    return torch.stack([fn(i, image) for i, image in enumerate(batch)])
