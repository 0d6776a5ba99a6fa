"""The base of the datasets that store encoded images: decode mode and transforms."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

from torch.utils.data import Dataset

from fastload.decode import opencv
from fastload.decode.opencv import DecodeMode, check_decode_mode, check_min_size, load_image

__all__ = ["ImageDataset"]

_LIMITS = "_limits"  # where a pickled dataset carries them


class ImageDataset(Dataset[tuple[Any, Any]]):
    """Shared by ImageFolder and LMDBDataset: ``decode`` and ``min_size`` say what an
    image becomes; ``transform`` and ``target_transform`` run on the result, or
    ``transforms`` on both together (torchvision's VisionDataset names).

    A dataset pickled carries the values of :attr:`carried_limits` at that moment, and
    unpickling it sets them in the process that receives it: a limit raised (or lowered)
    in the main process, as its error advises, holds in the loader's workers started by
    ``spawn`` or ``forkserver`` too, which import fastload afresh with the defaults.
    """

    #: The module-level limits a user may change (module, attribute), carried by a
    #: pickled dataset.
    carried_limits: ClassVar[tuple[tuple[ModuleType, str], ...]] = ((opencv, "MAX_PIXELS"),)

    def __init__(
        self,
        transform: Callable[[Any], Any] | None,
        target_transform: Callable[[Any], Any] | None,
        decode: DecodeMode,
        min_size: int | tuple[int, int] | None,
        transforms: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    ) -> None:
        check_decode_mode(decode)
        if transforms is not None and (transform or target_transform) is not None:
            raise ValueError(
                "give transforms (image and target together) or transform/target_transform, "
                "not both"
            )
        self.transforms = transforms
        self.transform = transform
        self.target_transform = target_transform
        self.decode = decode
        self.min_size = check_min_size(min_size)

    def __getstate__(self) -> dict[str, Any]:
        limits = {
            f"{module.__name__}.{name}": getattr(module, name)
            for module, name in self.carried_limits
        }
        return {**self.__dict__, _LIMITS: limits}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        limits = state.pop(_LIMITS, {})
        for module, name in self.carried_limits:
            key = f"{module.__name__}.{name}"
            if key in limits:  # process-wide, as the user set it in theirs
                setattr(module, name, limits[key])
        self.__dict__.update(state)

    def _load(self, data: bytes | memoryview, source: str) -> Any:
        return load_image(data, self.decode, source=source, min_size=self.min_size)

    def _finish(self, image: Any, label: Any, source: str) -> tuple[Any, Any]:
        try:  # a transform that decodes, or fails, names no file: the note does
            if self.transforms is not None:
                image, label = self.transforms(image, label)
            if self.transform is not None:
                image = self.transform(image)
        except Exception as error:
            error.add_note(f"in the transform of {source}")
            raise
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label
