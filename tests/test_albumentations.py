"""The albumentations adapter (the ``augment`` extra): skipped, with the reason, where
albumentations is not installed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from fastload import FastLoader
from fastload.transforms import Albumentations

A = pytest.importorskip("albumentations", reason="the augment extra: pip install albumentations")


def image(height=48, width=64, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_adapter_returns_a_chw_uint8_view_of_the_result():
    augment = Albumentations(A.Compose([A.RandomCrop(32, 40), A.HorizontalFlip(p=1.0)]))
    out = augment(image())
    assert out.shape == (3, 32, 40) and out.dtype == torch.uint8
    crop = A.Compose([A.HorizontalFlip(p=1.0)])(image=image())["image"]
    assert torch.equal(
        Albumentations(A.Compose([A.HorizontalFlip(p=1.0)]))(image()),
        torch.from_numpy(crop.copy()).permute(2, 0, 1),
    )


def test_adapter_accepts_totensorv2_output():
    from albumentations.pytorch import ToTensorV2

    out = Albumentations(A.Compose([ToTensorV2()]))(image())
    assert out.shape == (3, 48, 64) and out.dtype == torch.uint8


def test_adapter_warns_once_about_float_output():
    augment = Albumentations(A.Compose([A.Normalize()]))
    with pytest.warns(
        UserWarning, match="returns float32: normalising on the CPU moves 4x the bytes"
    ):
        assert augment(image()).dtype == torch.float32
    augment(image())  # no second warning: pytest's filterwarnings would not mind, but we count
    assert augment._warned


def test_adapter_takes_a_chw_tensor_as_the_hwc_image_it_views():
    flip = Albumentations(A.Compose([A.HorizontalFlip(p=1.0)]))
    array = image()
    tensor = torch.from_numpy(array).permute(2, 0, 1)
    assert torch.equal(flip(tensor), flip(array))
    assert torch.equal(flip(tensor), tensor.flip(-1))


def test_adapter_rejects_other_inputs_and_non_transforms():
    with pytest.raises(TypeError, match="takes an HWC uint8 ndarray or a CHW tensor, got list"):
        Albumentations(A.Compose([]))([[0]])
    with pytest.raises(TypeError, match="must be an albumentations transform, got int"):
        Albumentations(3)


def test_adapter_pickles():
    augment = pickle.loads(pickle.dumps(Albumentations(A.Compose([A.CenterCrop(8, 8)]))))
    assert augment(image()).shape == (3, 8, 8)


class SameImage(Dataset):
    def __init__(self, transform) -> None:
        self.transform = transform

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        return self.transform(image(seed=1)), index


def crops(loader) -> list[int]:
    """A fingerprint of each sample's random crop (the pixel sum of the crop)."""
    return [int(images[i].sum()) for images, _ in loader for i in range(len(images))]


def test_workers_draw_different_augmentations_reproducibly():
    def loader(seed):
        augment = Albumentations(A.Compose([A.RandomCrop(16, 16)], seed=7))
        return FastLoader(
            SameImage(augment),
            batch_size=1,
            num_workers=2,
            generator=torch.Generator().manual_seed(seed),
        )

    first = crops(loader(0))
    worker0, worker1 = first[0::2], first[1::2]
    assert worker0 != worker1  # albumentations alone gives both workers one sequence
    assert crops(loader(0)) == first
    assert crops(loader(1)) != first
