"""The first stage: samples read from storage and decoded with OpenCV.

- ``base``: what every image dataset shares (decode mode, transforms);
- ``decode``: the one CPU decode path (OpenCV, reduced-size JPEG, limits);
- ``folder``: ``ImageFolder``, torchvision's layout, sample lists as NumPy arrays.

The LMDB-backed dataset lives with its file format in ``fastload.lmdb``.
"""

from fastload.datasets.folder import ImageFolder

__all__ = ["ImageFolder"]
