"""fastload: keep the GPU fed.

Heavy modules (torch, OpenCV) load on first use of a name, so ``import fastload`` is quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload._lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> module that defines it.
_EXPORTS = {
    "DataPrefetcher": "fastload.prefetch",
    "FastLoader": "fastload.loader",
    "diagnose": "fastload.tools.diagnostics",
    "timed": "fastload.tools.diagnostics",
    "ImageFolder": "fastload.datasets.folder",
    "LMDBDataset": "fastload.lmdb",
    "write_lmdb": "fastload.lmdb",
    "auto_num_workers": "fastload.loader",
    "make_image_folder": "fastload.testing.synthetic",
}

__all__ = [
    "DataPrefetcher",
    "FastLoader",
    "ImageFolder",
    "LMDBDataset",
    "__version__",
    "auto_num_workers",
    "diagnose",
    "make_image_folder",
    "timed",
    "write_lmdb",
]

if TYPE_CHECKING:
    from fastload.datasets.folder import ImageFolder
    from fastload.lmdb import LMDBDataset, write_lmdb
    from fastload.loader import FastLoader, auto_num_workers
    from fastload.prefetch import DataPrefetcher
    from fastload.testing.synthetic import make_image_folder
    from fastload.tools.diagnostics import diagnose, timed


#: The packages the docs name as ``fastload.X``: reachable after ``import fastload``.
_SUBMODULES = (
    "collate",
    "datasets",
    "decode",
    "gpu",
    "integrations",
    "lmdb",
    "loader",
    "prefetch",
    "records",
    "seeds",
    "shards",
    "testing",
    "tools",
    "transforms",
)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__, _SUBMODULES)
