"""The benchmarks' image data: deterministic photo-like JPEGs, generated once.

- ``jpeg_folder``: 1000 JPEGs of 500x375 (a typical ImageNet photo) in 10 class
  sub-folders, about 50 kB each, under benchmarks/.data/ (ignored by git). The same seed
  gives the same bytes, so every benchmark and every machine reads the same files.
- ``data_sets``: an image folder and its LMDB copy, for the end-to-end benchmarks.
- ``photo_jpegs``: encoded JPEGs in memory cut from real photographs (scikit-image's
  bundled ones), ImageNet-like in size and content, for decoder benchmarks.

Usage:
    python -m benchmarks.lib.data [--images-per-class 100] [--root DIR]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from fastload import make_image_folder, write_lmdb
from fastload.testing.synthetic import photo_like_image

DATA = Path(__file__).resolve().parents[1] / ".data"  # benchmarks/.data
DEFAULT_ROOT = DATA / "jpeg"
PHOTOGRAPHS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
               "immunohistochemistry", "retina", "stereo_motorcycle")  # fmt: skip


def jpeg_folder(root: Path = DEFAULT_ROOT, images_per_class: int = 100) -> Path:
    """The benchmark image folder, generated on first use."""
    return make_image_folder(
        root, num_classes=10, images_per_class=images_per_class, progress=sys.stderr.isatty()
    )


def photo_folder(root: Path, images: int, *, num_classes: int = 10, chunk: int = 250) -> Path:
    """``images`` photo JPEGs (see ``photo_jpegs``) in ImageFolder layout, written once;
    chunks are made in parallel (OpenCV releases the GIL) with a seed each."""
    done = root / ".complete"
    if done.exists():
        return root

    def write(start: int) -> None:
        jpegs, _ = photo_jpegs(min(chunk, images - start), seed=start)
        for index, jpeg in enumerate(jpegs, start):
            path = root / f"class_{index % num_classes:02d}" / f"img_{index:06d}.jpg"
            path.write_bytes(jpeg)

    for label in range(num_classes):
        (root / f"class_{label:02d}").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor() as pool:
        list(pool.map(write, range(0, images, chunk)))
    done.touch()  # only a finished folder is reused
    return root


def photographs() -> tuple[list[np.ndarray], str]:
    """scikit-image's bundled colour photographs as BGR arrays, and where they came from;
    photo-like synthetic images when scikit-image is not installed."""
    try:
        import skimage.data
    except ImportError:
        rng = np.random.default_rng(0)
        return [photo_like_image(rng, 600, 800) for _ in range(4)], "synthetic (no scikit-image)"
    photos = []
    for name in PHOTOGRAPHS:
        photo = getattr(skimage.data, name)()
        photo = photo[0] if isinstance(photo, tuple) else photo  # the stereo pair's left image
        photos.append(cv2.cvtColor(photo, cv2.COLOR_RGB2BGR))
    return photos, "scikit-image photographs: " + ", ".join(PHOTOGRAPHS)


def photo_jpegs(count: int, *, quality: int = 90, seed: int = 0) -> tuple[list[bytes], str]:
    """``count`` JPEGs of 500x375 or 375x500 (a typical ImageNet photo), each a random
    crop of a photograph with its own flip and exposure, encoded at ``quality``."""
    photos, source = photographs()
    rng = np.random.default_rng(seed)
    encoded = []
    for index in range(count):
        photo = photos[index % len(photos)]
        height, width = photo.shape[:2]
        out_w, out_h = (500, 375) if rng.random() < 0.75 else (375, 500)
        scale = rng.uniform(0.5, 1.0) * min(height / out_h, width / out_w)
        crop_h, crop_w = int(out_h * scale), int(out_w * scale)
        top, left = rng.integers(0, height - crop_h + 1), rng.integers(0, width - crop_w + 1)
        image = cv2.resize(photo[top : top + crop_h, left : left + crop_w], (out_w, out_h),
                           interpolation=cv2.INTER_AREA)  # fmt: skip
        if rng.random() < 0.5:
            image = image[:, ::-1]
        image = cv2.convertScaleAbs(image, alpha=rng.uniform(0.8, 1.2), beta=rng.uniform(-20, 20))
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode photo JPEG {index}")
        encoded.append(data.tobytes())
    return encoded, source


def data_sets(images: int, source: str) -> tuple[Path, Path]:
    """The JPEG folder and its LMDB copy, generated on first use."""
    if source == "photos":
        folder, database = (
            photo_folder(DATA / f"photos-{images}", images),
            DATA / f"photos-{images}.lmdb",
        )
    elif images == 1000:
        folder, database = jpeg_folder(), DATA / "train.lmdb"
    else:
        per_class = max(1, images // 10)
        folder = jpeg_folder(DATA / f"jpeg-{per_class * 10}", per_class)
        database = DATA / f"train-{per_class * 10}.lmdb"
    if not database.exists():
        write_lmdb(folder, database, progress=False)
    return folder, database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--images-per-class", type=int, default=100)
    args = parser.parse_args()
    print(jpeg_folder(args.root, args.images_per_class))


if __name__ == "__main__":
    main()
