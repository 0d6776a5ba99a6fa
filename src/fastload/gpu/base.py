"""The base of every batch augmentation: draw per-sample parameters, then apply them.

A module's ``forward(images, params=None)`` first calls ``sample_params`` (one
vectorised draw for the whole batch, on the batch's device), then ``apply_transform``
(Kornia's name: ``nn.Module.apply(fn)`` must keep working on a model that holds one). Passing
``params`` replays an augmentation, which is how tests compare with torchvision.

The base owns what every module shares: the draws (uniform, integer, normal, Beta,
Dirichlet, a permutation), each honouring ``same_on_batch`` and, inside
``gpu.sample_seeds``, each sample's own seed; the probability ``p``; and the targets
beside the images (masks reach ``apply_masks`` as (N, K, H, W); the parameters of boxes
and keypoints come to the host once per batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torchvision import tv_tensors

from fastload._checks import check_probability
from fastload.batches import has_targets
from fastload.gpu.targets import join, split
from fastload.seeds import keyed, keyed_generator, keyed_normal, keyed_uniform

__all__ = ["BatchTransform", "Params"]

Params = dict[str, Tensor]


def check_images(images: Any, name: str, *, rgb: bool = False) -> None:
    """Raise a clear error unless ``images`` is an NCHW uint8/floating tensor."""
    if not isinstance(images, Tensor):
        raise TypeError(f"{name} expects a tensor batch (N, C, H, W), got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(
            f"{name} expects a 4-D batch (N, C, H, W), got shape {tuple(images.shape)}"
        )
    if images.dtype != torch.uint8 and not images.is_floating_point():
        raise TypeError(f"{name} expects uint8 or floating images, got {images.dtype}")
    channels, last = images.shape[1], images.shape[-1]
    if channels > 4 and last in (1, 3, 4):
        raise ValueError(
            f"{name} expects channels first (N, C, H, W), got shape {tuple(images.shape)}, "
            "which looks channels-last (N, H, W, C): use images.permute(0, 3, 1, 2), or a "
            "dataset that returns CHW tensors (decode='tensor')"
        )
    if rgb and images.shape[1] != 3:
        raise ValueError(f"{name} works on RGB images (3 channels), got {images.shape[1]} channels")


def draw_uniform(
    n: int,
    *extra: int,
    device: torch.device,
    generator: torch.Generator | None = None,
    same_on_batch: bool = False,
) -> Tensor:
    """Uniform [0, 1) draws of shape (n, *extra): from ``generator``; else inside
    ``gpu.sample_seeds`` row ``i`` from sample ``i``'s seed; else from torch's generator.
    ``same_on_batch`` repeats the first row."""
    rows = 1 if same_on_batch else n
    keyed = None if generator is not None else keyed_uniform(n, extra, device)
    if keyed is not None:
        values = keyed[:rows]
    else:
        values = torch.rand((rows, *extra), device=device, generator=generator)
    return values.expand(n, *extra) if same_on_batch else values


class BatchTransform(nn.Module):
    """Base of the ``fastload.gpu`` modules.

    Subclasses implement ``sample_params(shape, device, generator) -> dict`` and
    ``apply_transform(images, params) -> images``, and use the sampling helpers below, which
    honour ``same_on_batch`` (one draw for the whole batch, as torchvision does).

    Args:
        p: Per-sample probability of applying the transform.
        same_on_batch: Draw one set of parameters for the whole batch.
        generator: A ``torch.Generator`` on the batch's device, for reproducible draws.

    Raises:
        ValueError: ``p`` is not a probability in [0, 1]. On a call (every module):
            images that are not 4-D, look channels-last (N, H, W, C) or, for a colour
            module, do not have 3 channels; boxes or keypoints not one per image; masks of
            another size.
        TypeError: On a call, images that are not a uint8 or floating tensor, or masks,
            boxes or keypoints beside the images of a module that cannot move them.

    Example:
        >>> class AddOne(BatchTransform):
        ...     def sample_params(self, shape, device, generator=None):
        ...         return {"apply": self._applies(shape[0], device, generator)}
        ...     def apply_transform(self, images, params):
        ...         return torch.where(params["apply"].view(-1, 1, 1, 1), images + 1, images)
        >>> AddOne(p=1.0)(torch.zeros(2, 1, 1, 1)).flatten().tolist()
        [1.0, 1.0]
    """

    rgb_only = False  # colour transforms need 3 channels
    #: What the module does to masks, boxes and keypoints given beside the images: "pass"
    #: leaves them as they are (colour and pixel operations); "transform" moves them with
    #: the image (``apply_masks``, ``transform_target``); "refuse" raises, for geometry
    #: that cannot move them yet: a silent drift between image and boxes is never right.
    targets = "refuse"
    #: Parameters that ``transform_target`` takes as tensors, not as Python values (a
    #: whole displacement field: too large to bring to the host).
    device_params: tuple[str, ...] = ()
    #: ``p`` when none is given: 1.0, or torchvision's 0.5 for a coin-only transform
    #: (a flip, an invert, ...).
    default_p = 1.0

    def __init__(
        self,
        p: float | None = None,
        *,
        same_on_batch: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.p = check_probability(self.default_p if p is None else p)
        self.same_on_batch = same_on_batch
        self.generator = generator

    def forward(self, *inputs: Any, params: Params | None = None) -> Any:
        """``module(images)``, or torchvision v2's form with targets beside the images:
        ``module(images, targets)`` returns ``(images, targets)`` of the same structure,
        masks, boxes and keypoints moved with the same per-sample parameters (see
        :mod:`fastload.gpu.targets`)."""
        if len(inputs) == 1 and not has_targets(inputs[0]):
            return self._images(inputs[0], params)[0]
        name = type(self).__name__
        parts = split(inputs, name)
        images, params = self._images(parts.images, params)
        leaves = list(parts.leaves)
        leaves[parts.image] = images
        found = parts.targets()
        if found and self.targets == "refuse":
            kinds = sorted({type(leaf).__name__ for _, leaf in found})
            raise TypeError(
                f"{name} cannot move {', '.join(kinds)} with the images yet: apply it to the "
                "images alone, or use a module that transforms targets (flips, crops, Resize)"
            )
        if found and self.targets == "transform":
            self._move_targets(found, leaves, params, parts.images.shape, parts.per_image_masks)
        return join(parts, leaves)

    def _images(self, images: Tensor, params: Params | None) -> tuple[Tensor, Params]:
        check_images(images, type(self).__name__, rgb=self.rgb_only)
        if params is None:
            params = self.sample_params(images.shape, images.device, self.generator)
        with torch.autocast(images.device.type, enabled=False):
            out = self.apply_transform(images, params)
        return (tv_tensors.Image(out) if isinstance(images, tv_tensors.Image) else out), params

    def _move_targets(
        self,
        found: list[tuple[int, Any]],
        leaves: list[Any],
        params: Params,
        shape: torch.Size,
        per_image_masks: dict[int, int],
    ) -> None:
        """Masks of the whole batch, (N, H, W) or (N, K, H, W); an image's own masks
        (in its target beside its boxes) and its BoundingBoxes or KeyPoints, in batch
        order (see :mod:`fastload.gpu.targets`)."""
        n, size = shape[0], (int(shape[-2]), int(shape[-1]))
        rows: list[dict[str, Any]] = []  # each sample's parameters, on the host once
        others = 0  # BoundingBoxes and KeyPoints: one per image, in batch order
        own_masks: list[tuple[int, int]] = []  # (leaf, sample): moved together below
        for index, leaf in found:
            if isinstance(leaf, tv_tensors.Mask):
                if index not in per_image_masks:
                    leaves[index] = self._move_mask(leaf, params, size, n)
                elif per_image_masks[index] < n:
                    own_masks.append((index, per_image_masks[index]))
                continue
            sample, others = others, others + 1
            if sample < n:
                rows = rows or self._target_rows(params, n)
                leaves[index] = self.transform_target(leaf, rows[sample], size)
        if others not in (0, n):
            raise ValueError(
                f"{type(self).__name__}: BoundingBoxes and KeyPoints come one per image, in "
                f"batch order; got {others} for {n} images"
            )
        if own_masks:
            self._move_own_masks(own_masks, leaves, params, size, n)

    def _target_rows(self, params: Params, n: int) -> list[dict[str, Any]]:
        """Each sample's parameters for ``transform_target``: Python values, copied to the
        host together with one wait for the device; ``device_params`` stay tensors."""
        per_sample = {k: v for k, v in params.items() if v.dim() and len(v) == n}
        host = _to_host({k: v for k, v in per_sample.items() if k not in self.device_params})
        kept = {k: v for k, v in per_sample.items() if k in self.device_params}
        return [
            {**{k: values[i] for k, values in host.items()}, **{k: v[i] for k, v in kept.items()}}
            for i in range(n)
        ]

    def _move_mask(self, mask: Any, params: Params, size: tuple[int, int], n: int) -> Any:
        """A mask of the whole batch, (N, H, W) or (N, K, H, W)."""
        plain = mask.as_subclass(Tensor)
        if plain.dim() not in (3, 4) or tuple(plain.shape[-2:]) != size or len(plain) != n:
            raise ValueError(self._mask_shape_error(mask, size, n))
        return tv_tensors.wrap(self._apply_masks(plain, params), like=mask)

    def _move_own_masks(
        self,
        own: list[tuple[int, int]],
        leaves: list[Any],
        params: Params,
        size: tuple[int, int],
        n: int,
    ) -> None:
        """Each image's own (K, H, W) or (H, W) masks, in one call per dtype: every mask
        row becomes a sample of its own with its image's parameters, so a batch of
        instance masks costs one gather, not one per image."""
        groups: dict[tuple[torch.dtype, torch.device], list[tuple[int, int]]] = {}
        for index, sample in own:
            mask = leaves[index]
            if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != size:
                raise ValueError(self._mask_shape_error(mask, size, n))
            groups.setdefault((mask.dtype, mask.device), []).append((index, sample))
        for members in groups.values():
            masks = [leaves[index].as_subclass(Tensor).reshape(-1, *size) for index, _ in members]
            rows = torch.tensor([len(mask) for mask in masks])
            samples = torch.repeat_interleave(torch.tensor([s for _, s in members]), rows)
            samples = samples.to(masks[0].device)
            expanded = {k: v[samples] if v.dim() and len(v) == n else v
                        for k, v in params.items()}  # fmt: skip
            moved = self._apply_masks(torch.cat(masks), expanded)
            for (index, _), part in zip(members, torch.split(moved, rows.tolist()), strict=True):
                mask = leaves[index]
                leaves[index] = tv_tensors.wrap(
                    part.reshape(*mask.shape[:-2], *part.shape[-2:]), like=mask
                )

    def _mask_shape_error(self, mask: Any, size: tuple[int, int], n: int) -> str:
        return (
            f"{type(self).__name__}: a Mask beside {n} images of {size} must be (N, H, W) "
            f"or (N, K, H, W) for the batch, or (K, H, W) per image, of that size; got "
            f"{tuple(mask.shape)}"
        )

    def _apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        """(N, H, W) or (N, K, H, W) masks through ``apply_masks``, which sees 4-D."""
        if masks.dim() == 4:
            return self.apply_masks(masks, params)
        return self.apply_masks(masks.unsqueeze(1), params).squeeze(1)

    def apply_masks(self, masks: Tensor, params: Params) -> Tensor:
        """The transform on (N, K, H, W) masks, nearest where it resamples, 0 (background)
        where it brings pixels from outside."""
        raise NotImplementedError

    def transform_target(self, target: Any, params: dict[str, Any], size: tuple[int, int]) -> Any:
        """The transform on one sample's ``BoundingBoxes`` or ``KeyPoints``, with that
        sample's parameters (Python numbers and lists, tensors for ``device_params``), the
        image being ``size`` before it."""
        raise NotImplementedError

    def sample_params(
        self, shape: torch.Size, device: torch.device, generator: torch.Generator | None = None
    ) -> Params:
        """The draws for a batch of ``shape``; by default each sample's coin alone."""
        return {"apply": self._applies(shape[0], device, generator)}

    def apply_transform(self, images: Tensor, params: Params) -> Tensor:
        raise NotImplementedError

    # --- draws: one call for the batch, shape (N, *extra), same_on_batch and keyed here ----

    def _rand(
        self, n: int, *extra: int, device: torch.device, generator: torch.Generator | None
    ) -> Tensor:
        """Uniform in [0, 1)."""
        return draw_uniform(
            n, *extra, device=device, generator=generator, same_on_batch=self.same_on_batch
        )

    def _uniform(
        self,
        n: int,
        low: float,
        high: float,
        *extra: int,
        device: torch.device,
        generator: torch.Generator | None,
    ) -> Tensor:
        """Uniform in [low, high)."""
        return low + (high - low) * self._rand(n, *extra, device=device, generator=generator)

    def _applies(self, n: int, device: torch.device, generator: torch.Generator | None) -> Tensor:
        """Per-sample coin flips with probability ``p`` (bool, shape (N,))."""
        return self._rand(n, device=device, generator=generator) < self.p

    def _integers(
        self,
        n: int,
        high: int,
        *extra: int,
        device: torch.device,
        generator: torch.Generator | None,
    ) -> Tensor:
        """Uniform integers in [0, high) (int64)."""
        draws = self._rand(n, *extra, device=device, generator=generator)
        return (draws * high).long().clamp_(max=high - 1)

    def _normal(
        self, n: int, *extra: int, device: torch.device, generator: torch.Generator | None
    ) -> Tensor:
        """Standard normal."""
        rows = 1 if self.same_on_batch else n
        values = None if generator is not None else keyed_normal(n, extra, device)
        if values is not None:  # inside gpu.sample_seeds
            values = values[:rows]
        else:
            values = torch.randn((rows, *extra), device=device, generator=generator)
        return values.expand(n, *extra) if self.same_on_batch else values

    def _beta(
        self, n: int, alpha: float, device: torch.device, generator: torch.Generator | None
    ) -> Tensor:
        """Beta(alpha, alpha) (N,), from two Gamma draws (torch.distributions takes no
        generator)."""
        gammas = self._gammas(n, 2, alpha, device, generator, torch._standard_gamma)
        beta = gammas[:, 0] / gammas.sum(dim=1)
        return beta.expand(n) if self.same_on_batch else beta

    def _dirichlet(
        self,
        n: int,
        parts: int,
        alpha: float,
        device: torch.device,
        generator: torch.Generator | None,
    ) -> Tensor:
        """Dirichlet(alpha, ..., alpha) weights (N, parts)."""
        weights = self._gammas(n, parts, alpha, device, generator, torch._sample_dirichlet)
        return weights.expand(n, parts)

    def _gammas(
        self,
        n: int,
        parts: int,
        alpha: float,
        device: torch.device,
        generator: torch.Generator | None,
        sample: Callable[..., Tensor],
    ) -> Tensor:
        # Inside gpu.sample_seeds, from the batch's CPU generator (no keyed Gamma draws).
        on = device
        if generator is None and keyed():
            on, generator = torch.device("cpu"), keyed_generator()
        concentration = torch.full((1 if self.same_on_batch else n, parts), alpha, device=on)
        return sample(concentration, generator=generator).to(device)

    @staticmethod
    def _permutation(count: int, generator: torch.Generator | None) -> Tensor:
        """A random order of ``count`` on the host, for the batch (it decides Python control
        flow: reading it from a GPU would stall the stream). A CUDA generator cannot draw
        it; then the batch's keyed CPU generator does, or torch's outside
        ``gpu.sample_seeds``."""
        on_cpu = generator if generator is not None and generator.device.type == "cpu" else None
        return torch.randperm(count, generator=on_cpu or keyed_generator())

    def extra_repr(self) -> str:
        public = {
            key: value
            for key, value in vars(self).items()
            if not key.startswith("_") and key != "training" and key != "generator"
        }
        return ", ".join(f"{key}={value!r}" for key, value in public.items())


def _to_host(values: dict[str, Tensor]) -> dict[str, list[Any]]:
    """Tensors as Python lists: every copy queued, then one wait for the device."""
    on_cuda = [value for value in values.values() if value.is_cuda]
    if not on_cuda:
        return {key: value.tolist() for key, value in values.items()}
    copies = {key: value.to("cpu", non_blocking=True) for key, value in values.items()}
    torch.cuda.current_stream(on_cuda[0].device).synchronize()
    return {key: value.tolist() for key, value in copies.items()}


#: On a CPU, samples of at least this many elements are copied whole by blend_where:
#: ``where`` picks element by element there, slower than a copy per sample for all but
#: small images, where the copies' Python loop costs more.
COPY_ELEMENTS = 8192


def blend_where(apply: Tensor, changed: Tensor, original: Tensor) -> Tensor:
    """Per sample: ``changed`` where ``apply`` (N,) is set, else ``original``. On a GPU one
    ``where`` (no Python branch); on a CPU, for images of :data:`COPY_ELEMENTS` or more, a
    copy of each sample's whole image from the one it takes."""
    if (
        original.device.type != "cpu"
        or original.shape[1:].numel() < COPY_ELEMENTS
        or changed.device != original.device
        or changed.shape != original.shape
        or apply.dtype != torch.bool
    ):
        return torch.where(apply.view(-1, 1, 1, 1), changed, original)
    out = torch.empty_like(original, dtype=torch.promote_types(changed.dtype, original.dtype))
    for row, take in enumerate(apply.view(-1).expand(len(original)).tolist()):
        out[row].copy_(changed[row] if take else original[row])
    return out
