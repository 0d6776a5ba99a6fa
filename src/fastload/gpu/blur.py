"""GaussianBlur with a per-sample sigma: one grouped convolution for the whole batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fastload._checks import check_int, pair
from fastload.gpu.base import BatchTransform, Params, blend_where
from fastload.gpu.functional import gaussian_blur

__all__ = ["GaussianBlur"]


class GaussianBlur(BatchTransform):
    """Blur each image with its own ``sigma`` drawn from ``sigma=(min, max)``.

    ``kernel_size`` (odd, an int or ``(kx, ky)``) and ``sigma`` mean what they mean in
    torchvision, reflect padding included. The per-sample kernels are applied as one
    depthwise (grouped) convolution per axis over all N x C channels.

    Args:
        kernel_size: The kernel's size, odd: an int, or ``(kx, ky)``.
        sigma: A standard deviation, or the (min, max) range each sample draws it from.
        p: Probability of blurring each image.
        same_on_batch: One sigma for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``kernel_size`` that is not odd and positive, a ``sigma`` that is not
            positive or a range with min > max, or ``p`` not a probability.

    Example:
        >>> point = torch.zeros(1, 1, 5, 5)
        >>> point[..., 2, 2] = 1
        >>> blurred = GaussianBlur(3, sigma=1.0)(point)
        >>> round(float(blurred[0, 0, 2, 2]), 4), round(float(blurred.sum()), 4)
        (0.2042, 1.0)
    """

    targets = "pass"  # masks, boxes and keypoints stay as they are

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        sigma: float | Sequence[float] = (0.1, 2.0),
        *,
        p: float = 1.0,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p=p, same_on_batch=same_on_batch, generator=generator)
        kx, ky = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        kx, ky = check_int(kx, "kernel_size", low=1), check_int(ky, "kernel_size", low=1)
        if kx % 2 == 0 or ky % 2 == 0:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size!r}")
        self.kernel_size = (kx, ky)
        self.sigma = pair(sigma, "sigma")
        if self.sigma[0] <= 0:
            raise ValueError(f"sigma must be positive, got {sigma!r}")

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n = shape[0]
        return {
            "apply": self._applies(n, device, generator),
            "sigma": self._uniform(n, *self.sigma, device=device, generator=generator),
        }

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        blurred = gaussian_blur(images, params["sigma"], self.kernel_size)
        return blend_where(params["apply"], blurred, images)
