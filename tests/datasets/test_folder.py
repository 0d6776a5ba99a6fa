from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from fastload import FastLoader, ImageFolder, make_image_folder
from fastload.decode.opencv import ImageDecodeError


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


def private_dirty_kib() -> int:
    """This process's private dirty memory: pages it wrote, copy-on-write copies included."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise AssertionError("no Private_Dirty in smaps_rollup")


def growth_of_a_forked_reader(sample, count: int) -> int:
    """KiB a forked child dirties by looking up every sample once, as a worker does."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what a DataLoader worker is
        before = private_dirty_kib()
        for index in range(count):
            sample(index)
        os.write(write, str(private_dirty_kib() - before).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(write)
    return int(os.read(read, 64))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux /proc only")
def test_workers_do_not_copy_the_sample_list(tmp_path):
    for label in range(10):
        folder = tmp_path / f"class_{label}"
        folder.mkdir()
        for index in range(5000):
            (folder / f"{index:05d}_a_long_name_as_real_datasets_have.jpg").touch()
    ours = ImageFolder(tmp_path)
    theirs = torchvision.datasets.ImageFolder(str(tmp_path))
    assert ours.samples == theirs.samples and len(ours) == 50000
    assert [ours.sample(i) for i in (0, 49999)] == [theirs.samples[i] for i in (0, 49999)]
    # torchvision's list of 50,000 tuples gets copied page by page into the reader;
    # fastload's arrays hold no Python object per sample, so there is nothing to copy.
    assert growth_of_a_forked_reader(theirs.samples.__getitem__, len(theirs)) > 2048
    assert growth_of_a_forked_reader(ours.sample, len(ours)) < 512


def test_a_flat_folder_of_images_says_the_layout_it_expects(tmp_path):
    flat = make_image_folder(tmp_path / "set", num_classes=1, images_per_class=3, size=(8, 8))
    for image in (flat / "class_00").iterdir():
        image.rename(flat / image.name)
    (flat / "class_00").rmdir()
    with pytest.raises(FileNotFoundError) as caught:
        ImageFolder(flat)
    assert str(caught.value) == (
        f"{flat}: no class folders in it (3 images at its top level); an image folder holds "
        "one folder per class, ROOT/CLASS/IMAGE.jpg (one folder for a single class)"
    )
