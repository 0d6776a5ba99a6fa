"""AugMix on the batch: each sample mixes chains of the policies' operations, drawn per
sample, with Dirichlet weights, as torchvision v2's ``AugMix``."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode, v2

from fastload._checks import check_int, finite
from fastload.gpu.base import Params
from fastload.gpu.functional import Fill
from fastload.gpu.functional.dtype import back_to
from fastload.gpu.policies import Policy, Space

__all__ = ["AugMix"]


class AugMix(Policy):
    """AugMix: random chains of operations, mixed with each other and with the image.

    ``mixture_width`` chains of ``chain_depth`` operations (1 to 3 at random when it is
    not positive) from torchvision's AugMix ops (``all_ops=False``: without the
    colour ones), at bins below ``severity``; the chains are mixed by Dirichlet(``alpha``)
    weights and the mixture with the image by Beta(``alpha``, ``alpha``), per sample, as
    torchvision does (uint8 is truncated back, as there). Each sample draws its own chains:
    torchvision draws one set of operations for a whole batch.

    ``sample_params`` gives ``ops`` and ``magnitudes`` of shape (N, width, depth),
    ``weights`` (N, width) of the chains and ``original`` (N,) of the image itself.

    Args:
        severity: The operations' bins are drawn below it, 1 to 10.
        mixture_width: How many chains are mixed.
        chain_depth: Operations per chain; not positive: 1 to 3 at random, per chain.
        alpha: The Dirichlet and Beta distributions' parameter.
        all_ops: Use every AugMix operation; False leaves out the colour ones.
        interpolation: 'nearest' or 'bilinear' (or torchvision's ``InterpolationMode``),
            for the geometric operations.
        fill: The value of pixels that come from outside the image, on the image's own
            scale: one value or one per channel; None for 0.
        same_on_batch: One draw for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: A ``severity`` outside [1, 10], a ``mixture_width`` below 1, a
            ``chain_depth`` that is not an int, an ``alpha`` that is not positive, an
            ``interpolation`` other than nearest or bilinear, or a ``fill`` that is not
            finite.
        TypeError: On a call, masks, boxes or keypoints beside the images (the policies
            do not move them).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> images = torch.rand(2, 3, 16, 16)
        >>> augment = AugMix()
        >>> params = augment.sample_params(images.shape, images.device)
        >>> params["ops"].shape, params["weights"].shape
        (torch.Size([2, 3, 3]), torch.Size([2, 3]))
        >>> (params["original"] + params["weights"].sum(dim=1)).allclose(torch.ones(2))
        True
    """

    def __init__(
        self,
        severity: int = 3,
        mixture_width: int = 3,
        chain_depth: int = -1,
        alpha: float = 1.0,
        all_ops: bool = True,
        interpolation: InterpolationMode | str = InterpolationMode.BILINEAR,
        fill: Fill = None,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(interpolation, fill, same_on_batch=same_on_batch, generator=generator)
        self.severity = check_int(severity, "severity", low=1, high=10)
        self.mixture_width = check_int(mixture_width, "mixture_width", low=1)
        self.chain_depth = check_int(chain_depth, "chain_depth")
        self.alpha = finite(alpha, "alpha")
        if self.alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha!r}")
        self.all_ops = all_ops

    @property
    def space(self) -> Space:  # type: ignore[override]
        # read from torchvision each time: its tables hold lambdas, which do not pickle
        augmix = v2.AugMix
        space: Space = (
            augmix._AUGMENTATION_SPACE if self.all_ops else augmix._PARTIAL_AUGMENTATION_SPACE
        )
        return space

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        n, width = shape[0], self.mixture_width
        depth = self.chain_depth if self.chain_depth > 0 else 3
        table, signed = self._tables(10, shape[-2], shape[-1], device)
        ops = self._integers(n, len(table), width, depth, device=device, generator=generator)
        bins = self._integers(n, self.severity, width, depth, device=device, generator=generator)
        magnitudes = table[ops, bins] * self._signs(ops, signed, device, generator)
        if self.chain_depth <= 0:  # each chain 1 to 3 steps long; the rest are no-ops
            lengths = 1 + self._integers(n, 3, width, 1, device=device, generator=generator)
            ops = torch.where(torch.arange(depth, device=device) < lengths, ops, -1)
        beta = self._dirichlet(n, 2, self.alpha, device, generator)
        return {
            "ops": ops,
            "magnitudes": magnitudes,
            "original": beta[:, 0],
            "weights": self._dirichlet(n, width, self.alpha, device, generator) * beta[:, 1:],
        }

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        maths = images.dtype if images.is_floating_point() else torch.float32
        mix = params["original"].to(maths).view(-1, 1, 1, 1) * images
        for chain in range(self.mixture_width):
            chained = self._apply_steps(
                images, params["ops"][:, chain], params["magnitudes"][:, chain]
            )
            mix = mix + params["weights"][:, chain].to(maths).view(-1, 1, 1, 1) * chained
        return back_to(mix, images.dtype)  # a convex sum: within the dtype's range
