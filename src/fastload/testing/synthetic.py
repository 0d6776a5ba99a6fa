"""Deterministic, photo-like JPEG image folders, so benchmarks and the demo need no download.

Real photographs compress and decode very differently from noise or flat colour: they
hold smooth regions, edges and fine texture. The images here mix the three (fractal
noise at several octaves, a few soft-edged shapes, grain), which puts their JPEG size
and decode time close to a photograph's of the same size.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from fastload.system import available_cpus

__all__ = ["make_image_folder", "photo_like_image"]


def _fractal_noise(
    rng: np.random.Generator, height: int, width: int, *, octaves: int, decay: float
) -> np.ndarray:
    """Smooth noise summed over octaves: each doubles the frequency, amplitude / decay."""
    noise = np.zeros((height, width, 3), np.float32)
    for octave in range(octaves):
        cells = 2 ** (octave + 1)
        coarse = rng.standard_normal((cells, max(2, cells * width // height), 3)).astype(np.float32)
        resized = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
        noise += (resized / decay**octave).astype(np.float32)
    return noise


def photo_like_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """One HWC uint8 BGR image (OpenCV's channel order) with photo-like statistics."""
    background = _fractal_noise(rng, height, width, octaves=7, decay=1.35)
    image = background * 30 + rng.uniform(60, 190, size=3).astype(np.float32)
    # Texture is mostly luminance, as in photographs, with a little colour noise; the
    # objects share one field, each at its own offset, which is 5x cheaper than one each.
    texture = _fractal_noise(rng, height, width, octaves=7, decay=1.15)
    texture = texture.mean(axis=2, keepdims=True) * 45 + texture * 6
    for _ in range(int(rng.integers(3, 8))):  # objects: soft-edged, textured ellipses
        center = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        axes = (
            int(rng.integers(width // 16, width // 3)),
            int(rng.integers(height // 16, height // 3)),
        )
        outline = np.zeros((height, width), np.float32)
        cv2.ellipse(outline, center, axes, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
        mask = cv2.GaussianBlur(outline, (0, 0), sigmaX=float(rng.uniform(1, 6)))[..., None]
        shift = (int(rng.integers(0, height)), int(rng.integers(0, width)))
        colour = rng.uniform(0, 255, size=3).astype(np.float32) + np.roll(texture, shift, (0, 1))
        image = image * (1 - mask) + colour * mask
    image += rng.standard_normal(image.shape, dtype=np.float32) * 4  # sensor grain
    photo: np.ndarray = np.clip(image, 0, 255).astype(np.uint8)
    return photo


def make_image_folder(
    root: str | Path,
    *,
    num_classes: int = 10,
    images_per_class: int = 100,
    size: tuple[int, int] = (500, 375),
    quality: int = 90,
    seed: int = 0,
    progress: bool = False,
) -> Path:
    """Write ``root/class_XX/img_XXXXX.jpg`` in torchvision ImageFolder layout.

    The same arguments give byte-identical files. Files already present are kept, so a
    second call on the same folder costs nothing.

    Args:
        root: Folder to fill; created if missing.
        num_classes: Number of class sub-folders.
        images_per_class: JPEGs in each class.
        size: ``(width, height)`` of every image; 500x375 is a typical ImageNet photo.
        quality: JPEG quality, 1 to 100.
        seed: Seed for the images' content.
        progress: Show a tqdm progress bar.

    Returns:
        ``root`` as a Path.

    Example:
        >>> import tempfile
        >>> folder = make_image_folder(tempfile.mkdtemp(), num_classes=2, images_per_class=1)
        >>> sorted(p.name for p in folder.iterdir())
        ['class_00', 'class_01']
    """
    if num_classes < 1 or images_per_class < 1:
        raise ValueError(
            "num_classes and images_per_class must be >= 1, "
            f"got {num_classes} and {images_per_class}"
        )
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    root = Path(root)
    jobs = [
        (
            root / f"class_{label:02d}" / f"img_{label * images_per_class + index:05d}.jpg",
            label,
            index,
        )
        for label in range(num_classes)
        for index in range(images_per_class)
    ]
    for folder in {path.parent for path, _, _ in jobs}:
        folder.mkdir(parents=True, exist_ok=True)

    def write(job: tuple[Path, int, int]) -> None:
        path, label, index = job
        if path.exists():
            return
        image = photo_like_image(np.random.default_rng([seed, label, index]), size[1], size[0])
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode {path}")
        # Write then rename: an interrupted run never leaves a truncated JPEG behind.
        partial = path.with_suffix(".part")
        partial.write_bytes(encoded.tobytes())
        partial.replace(path)

    # OpenCV and NumPy release the GIL in the heavy calls, so threads scale here.
    with ThreadPoolExecutor(available_cpus()) as pool:
        done = pool.map(write, jobs)
        for _ in tqdm(done, total=len(jobs), desc=f"images in {root}", disable=not progress):
            pass
    return root
