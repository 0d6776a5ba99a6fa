"""GaussianBlur with a per-sample sigma: one grouped convolution for the whole batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from fastload.gpu.base import BatchTransform, Params, blend_where, pair, restore, to_float

__all__ = ["GaussianBlur"]


def gaussian_kernels(sigma: Tensor, size: int) -> Tensor:
    """(N, size) normalised 1-D Gaussian kernels, one per sigma (torchvision's kernel)."""
    offsets = torch.arange(size, device=sigma.device, dtype=sigma.dtype) - (size - 1) / 2
    weights = torch.exp(-(offsets**2) / (2 * sigma.view(-1, 1) ** 2))
    return weights / weights.sum(dim=1, keepdim=True)


class GaussianBlur(BatchTransform):
    """Blur each image with its own ``sigma`` drawn from ``sigma=(min, max)``.

    ``kernel_size`` (odd, an int or ``(kx, ky)``) and ``sigma`` mean what they mean in
    torchvision, reflect padding included. The per-sample kernels are applied as one
    depthwise (grouped) convolution per axis over all N x C channels.
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        sigma: float | Sequence[float] = (0.1, 2.0),
        *,
        p: float = 1.0,
        same_on_batch: bool = False,
        generator=None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        kx, ky = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if kx < 1 or ky < 1 or kx % 2 == 0 or ky % 2 == 0:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size!r}")
        self.kernel_size = (int(kx), int(ky))
        self.sigma = pair(sigma, "sigma")
        if self.sigma[0] <= 0:
            raise ValueError(f"sigma must be positive, got {sigma!r}")

    def sample_params(self, shape, device, generator=None) -> Params:
        n = shape[0]
        return {
            "apply": self._applies(n, device, generator),
            "sigma": self._uniform(n, *self.sigma, device=device, generator=generator),
        }

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        n, c, height, width = images.shape
        if n == 0:  # a grouped convolution needs at least one group
            return images.clone()
        kx, ky = self.kernel_size
        if kx // 2 >= width or ky // 2 >= height:  # reflect padding needs a larger image
            raise ValueError(
                f"kernel_size {self.kernel_size} is too large for images of {height}x{width}"
            )
        pixels = to_float(images)
        sigma = params["sigma"].to(pixels.dtype)
        padded = F.pad(pixels, (kx // 2, kx // 2, ky // 2, ky // 2), mode="reflect")
        channels = padded.reshape(1, n * c, *padded.shape[-2:])
        row = gaussian_kernels(sigma, kx).repeat_interleave(c, dim=0).view(n * c, 1, 1, kx)
        column = gaussian_kernels(sigma, ky).repeat_interleave(c, dim=0).view(n * c, 1, ky, 1)
        blurred = F.conv2d(F.conv2d(channels, row, groups=n * c), column, groups=n * c)
        blurred = restore(blurred.view(n, c, height, width), images.dtype)
        return blend_where(params["apply"], blurred, images)
