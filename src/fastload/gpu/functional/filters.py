"""Gaussian blur with a sigma per sample: torchvision's kernels, applied as one depthwise
(grouped) convolution per axis over all N x C channels."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from fastload.gpu.functional.dtype import restore, to_float

__all__ = ["gaussian_blur", "gaussian_kernels"]


def gaussian_kernels(sigma: Tensor, size: int) -> Tensor:
    """(N, size) normalised 1-D Gaussian kernels, one per sigma (torchvision's kernel)."""
    offsets = torch.arange(size, device=sigma.device, dtype=sigma.dtype) - (size - 1) / 2
    weights = torch.exp(-(offsets**2) / (2 * sigma.view(-1, 1) ** 2))
    return weights / weights.sum(dim=1, keepdim=True)


def gaussian_blur(images: Tensor, sigma: Tensor, kernel_size: tuple[int, int]) -> Tensor:
    """Blur each image with its own ``sigma`` (N,) by a ``(kx, ky)`` kernel, reflect
    padding as in torchvision."""
    n, c, height, width = images.shape
    if n == 0:  # a grouped convolution needs at least one group
        return images.clone()
    kx, ky = kernel_size
    if kx // 2 >= width or ky // 2 >= height:  # reflect padding needs a larger image
        raise ValueError(f"kernel_size {kernel_size} is too large for images of {height}x{width}")
    pixels = to_float(images)
    sigma = sigma.to(pixels.dtype)
    padded = F.pad(pixels, (kx // 2, kx // 2, ky // 2, ky // 2), mode="reflect")
    channels = padded.reshape(1, n * c, *padded.shape[-2:])
    row = gaussian_kernels(sigma, kx).repeat_interleave(c, dim=0).view(n * c, 1, 1, kx)
    column = gaussian_kernels(sigma, ky).repeat_interleave(c, dim=0).view(n * c, 1, ky, 1)
    blurred = F.conv2d(F.conv2d(channels, row, groups=n * c), column, groups=n * c)
    return restore(blurred.view(n, c, height, width), images.dtype)
