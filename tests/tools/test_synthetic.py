from __future__ import annotations

import cv2
import numpy as np
import pytest
from torchvision.datasets import ImageFolder

from fastload import make_image_folder


def test_layout_matches_imagefolder(tmp_path):
    root = make_image_folder(tmp_path, num_classes=3, images_per_class=2, size=(64, 48))
    dataset = ImageFolder(str(root))
    assert dataset.classes == ["class_00", "class_01", "class_02"]
    assert [label for _, label in dataset.samples] == [0, 0, 1, 1, 2, 2]
    image = cv2.imread(dataset.samples[0][0])
    assert image.shape == (48, 64, 3) and image.dtype == np.uint8


def test_same_arguments_give_identical_bytes(tmp_path):
    first = make_image_folder(tmp_path / "a", num_classes=1, images_per_class=2, size=(80, 60))
    second = make_image_folder(tmp_path / "b", num_classes=1, images_per_class=2, size=(80, 60))
    files = sorted(p.relative_to(first) for p in first.rglob("*.jpg"))
    assert len(files) == 2
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    other = make_image_folder(
        tmp_path / "c", num_classes=1, images_per_class=2, size=(80, 60), seed=1
    )
    assert (other / files[0]).read_bytes() != (first / files[0]).read_bytes()


def test_images_look_like_photos_not_noise_or_flat(tmp_path):
    root = make_image_folder(tmp_path, num_classes=1, images_per_class=1)
    image = cv2.imread(str(next(root.rglob("*.jpg")))).astype(np.float32)
    neighbour_diff = np.abs(np.diff(image, axis=1)).mean()
    assert image.std() > 20  # structure: not a flat colour
    assert 1 < neighbour_diff < 15  # texture, but neighbouring pixels correlate like a photo's


def test_existing_files_are_kept(tmp_path):
    root = make_image_folder(tmp_path, num_classes=1, images_per_class=1, size=(32, 32))
    path = next(root.rglob("*.jpg"))
    path.write_bytes(b"kept")
    make_image_folder(tmp_path, num_classes=1, images_per_class=1, size=(32, 32))
    assert path.read_bytes() == b"kept"
    assert not list(root.rglob("*.part"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 0}, "num_classes and images_per_class must be >= 1"),
        ({"quality": 0}, "quality must be in 1..100"),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_image_folder(tmp_path, **kwargs)
