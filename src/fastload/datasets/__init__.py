"""The first stage: samples read from storage and decoded with OpenCV.

- ``base``: what every image dataset shares (decode mode, transforms);
- ``folder``: ``ImageFolder``, torchvision's layout, sample lists as NumPy arrays;
- ``hf``: ``from_hf`` / ``HFImageDataset``, a Hugging Face ``datasets`` image set read
  bytes first (``hf_rows``: its columns and batched Arrow reads). Loaded on first use,
  so this package imports without ``datasets`` installed.

The LMDB-backed dataset lives with its file format in ``fastload.lmdb``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload._lazy import lazy_exports
from fastload.datasets.folder import ImageFolder

__all__ = ["HFImageDataset", "ImageFolder", "from_hf"]

if TYPE_CHECKING:
    from fastload.datasets.hf import HFImageDataset, from_hf

_EXPORTS = {"HFImageDataset": "fastload.datasets.hf", "from_hf": "fastload.datasets.hf"}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
