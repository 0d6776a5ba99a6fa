from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

from fastload import FastLoader, ImageFolder, make_image_folder
from fastload.decode import ImageDecodeError


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = make_image_folder(
        tmp_path_factory.mktemp("folder"), num_classes=3, images_per_class=2, size=(64, 48)
    )
    (root / "class_01" / "notes.txt").write_text("not an image: ImageFolder skips it")
    (root / "class_02" / "UPPER.JPG").write_bytes(
        (root / "class_02" / "img_00004.jpg").read_bytes()
    )
    return root


def test_same_classes_and_samples_as_torchvision(root):
    ours, theirs = ImageFolder(root), torchvision.datasets.ImageFolder(str(root))
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 7


def test_images_are_uint8_and_match_pil_within_decoder_tolerance(root):
    ours, theirs = ImageFolder(root), torchvision.datasets.ImageFolder(str(root))
    for index in range(len(ours)):
        image, label = ours[index]
        pil, pil_label = theirs[index]
        assert image.dtype == np.uint8 and image.shape == (48, 64, 3) and label == pil_label
        assert np.abs(image.astype(int) - np.asarray(pil).astype(int)).mean() < 1.5


def test_tensor_and_bytes_modes(root):
    as_tensor, _ = ImageFolder(root, decode="tensor")[0]
    as_bytes, _ = ImageFolder(root, decode=None)[0]
    assert as_tensor.shape == (3, 48, 64) and as_tensor.dtype == torch.uint8
    assert bytes(as_bytes.numpy()) == (root / "class_00" / "img_00000.jpg").read_bytes()


def test_transforms_and_min_size(root):
    dataset = ImageFolder(
        root, transform=lambda image: image.shape, target_transform=str, min_size=24
    )
    assert dataset[2] == ((24, 32, 3), "1")


def test_errors(tmp_path, root):
    with pytest.raises(FileNotFoundError, match="no such image folder"):
        ImageFolder(tmp_path / "missing")
    with pytest.raises(ValueError, match="decode must be 'numpy', 'tensor' or None"):
        ImageFolder(root, decode="PIL")
    bad = make_image_folder(tmp_path / "bad", num_classes=1, images_per_class=1, size=(8, 8))
    (bad / "class_00" / "img_00000.jpg").write_bytes(b"\xff\xd8 broken")
    with pytest.raises(ImageDecodeError, match=r"class_00/img_00000\.jpg"):
        ImageFolder(bad)[0]


def test_works_in_fastloader_with_workers(root):
    loader = FastLoader(ImageFolder(root, decode="tensor"), batch_size=3, num_workers=2)
    batches = list(loader)
    assert [tuple(images.shape) for images, _ in batches] == [
        (3, 3, 48, 64),
        (3, 3, 48, 64),
        (1, 3, 48, 64),
    ]
    assert [label for _, labels in batches for label in labels.tolist()] == [0, 0, 1, 1, 2, 2, 2]
