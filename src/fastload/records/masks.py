"""A folder of images with a parallel folder of PNG class masks as a record source."""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image

from fastload.decode.opencv import ImageDecodeError, decode_image
from fastload.records.format import Field
from fastload.records.sources import Encoding, existing_folder, pack_item, read_file
from fastload.records.targets import MASK

__all__ = ["MaskFolderSource"]

_MASK_MODES = {"P", "L", "1", "I;16", "I"}  # palette (VOC), grey, bilevel, 16/32-bit grey


@dataclass
class MaskFolderSource:
    """Every image under ``root`` (sorted, sub-folders included) with its class mask:
    ``masks/<same relative path>.png``, one class index per pixel (palette PNGs as in
    Pascal VOC give their indices, not colours). Each record holds the image file and
    the field ``mask`` ((H, W) uint8 or uint16).
    """

    root: Path
    masks: Path
    fields: ClassVar[list[str]] = ["mask"]
    classes: ClassVar[None] = None

    def __post_init__(self) -> None:
        from torchvision.datasets.folder import IMG_EXTENSIONS

        existing_folder(self.root, "image")
        existing_folder(self.masks, "mask")
        self.images = sorted(
            os.path.relpath(path, self.root)
            for path in self.root.rglob("*")
            if path.suffix.lower() in IMG_EXTENSIONS and path.is_file()
        )

    @property
    def description(self) -> str:
        return f"{self.root.resolve()} with masks {self.masks.resolve()}"

    def __len__(self) -> int:
        return len(self.images)

    def name(self, position: int) -> str:
        return str(self.root / self.images[position])

    def record(self, position: int, encoding: Encoding) -> bytes:
        path = self.name(position)
        mask_path = (self.masks / self.images[position]).with_suffix(".png")
        data = read_file(path)
        rgb = decode_image(data, source=path)
        if not mask_path.exists():
            raise FileNotFoundError(f"{mask_path}: no mask for {path}")
        mask = _read_mask(mask_path, rgb.shape[:2], image=path)
        return pack_item(rgb, None, {"mask": Field(MASK, mask)}, encoding, what=path, data=data)


def _read_mask(path: Path, size: tuple[int, int], *, image: str) -> np.ndarray:
    """The class mask at ``path`` for the image ``image`` of ``size`` (H, W): its header
    is checked (mode, size) before any pixel is decoded."""
    try:
        with warnings.catch_warnings():
            # the size is checked against the image's, itself within MAX_PIXELS
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(read_file(path))) as opened:
                if opened.mode not in _MASK_MODES:
                    raise ImageDecodeError(
                        f"{path}: a {opened.mode} image; masks hold one class index per pixel "
                        "(grey, palette or 16-bit PNG)"
                    )
                if (opened.height, opened.width) != size:
                    raise ImageDecodeError(
                        f"{path}: the mask is {opened.width}x{opened.height}, its image {image} "
                        f"is {size[1]}x{size[0]}"
                    )
                mask = np.asarray(opened)
    except Image.DecompressionBombError as error:  # a header that claims billions of pixels
        raise ImageDecodeError(f"{path}: not a mask for {image} ({error})") from error
    except (OSError, SyntaxError) as error:  # PIL's errors for corrupt files
        raise ImageDecodeError(f"{path}: not a readable PNG mask ({error})") from error
    if mask.dtype == np.bool_:
        return mask.astype(np.uint8)
    if mask.dtype.kind == "i":  # PIL's 32-bit grey
        if mask.min(initial=0) < 0 or mask.max(initial=0) > np.iinfo(np.uint16).max:
            raise ImageDecodeError(f"{path}: class indices outside 0..65535")
        return mask.astype(np.uint16)
    return mask
