"""The benchmarks' image data: a deterministic, photo-like JPEG folder, generated once.

1000 JPEGs of 500x375 (a typical ImageNet photo) in 10 class sub-folders, about 50 kB
each, under benchmarks/.data/ (ignored by git). The same seed gives the same bytes, so
every benchmark and every machine reads the same files.

Usage:
    python benchmarks/data.py [--images-per-class 100] [--root DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastload import make_image_folder

DEFAULT_ROOT = Path(__file__).resolve().parent / ".data" / "jpeg"


def jpeg_folder(root: Path = DEFAULT_ROOT, images_per_class: int = 100) -> Path:
    """The benchmark image folder, generated on first use."""
    return make_image_folder(root, num_classes=10, images_per_class=images_per_class, progress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--images-per-class", type=int, default=100)
    args = parser.parse_args()
    print(jpeg_folder(args.root, args.images_per_class))


if __name__ == "__main__":
    main()
