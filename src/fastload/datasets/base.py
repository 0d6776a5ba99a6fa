"""The base of the datasets that store encoded images: decode mode and transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset

from fastload.decode.opencv import DecodeMode, check_decode_mode, check_min_size, load_image

__all__ = ["ImageDataset"]


class ImageDataset(Dataset[tuple[Any, Any]]):
    """Shared by ImageFolder and LMDBDataset: ``decode`` and ``min_size`` say what an
    image becomes; ``transform`` and ``target_transform`` run on the result, or
    ``transforms`` on both together (torchvision's VisionDataset names)."""

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
